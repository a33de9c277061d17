"""Running pooled codes of several sets, for planners that grow sets one table at a time.

Greedy placement and the RL environment ask, for every table, "what would each device cost with
this table added?". The head's input is ``[sum / 8, mean, max, log n]`` of the set's table codes
(``cost_model.network.pooled_input``), and its first layer is linear: the sum and mean parts
are projected through it once per table and kept as running sums, so scoring D devices costs
only the max part's projection and the rest of the head (float32, one thread, no autograd).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn import functional

from autoshard.types import Table
from cost_model.network import LOG_MS_MAX, LOG_MS_MIN, OUTPUTS

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel

TOTAL = OUTPUTS.index("total")


class SplitHead:
    """The network's head (Linear + SiLU layers) with its first layer split by the parts of
    ``pooled_input``: ``[sum / 8 | mean | max | log n]``, each ``width`` wide."""

    def __init__(self, head: torch.nn.Sequential, width: int) -> None:
        layers = [(m.weight.detach().float().T.contiguous(), m.bias.detach().float().clone())
                  for m in head if isinstance(m, torch.nn.Linear)]
        (first, self.first_bias), self.rest = layers[0], layers[1:]
        self.hidden = first.shape[1]
        self.w_sum, self.w_mean = first[:width] / 8.0, first[width:2 * width].contiguous()
        self.w_max, self.w_log = first[2 * width:3 * width].contiguous(), first[3 * width]
        w, b = self.rest[-1]
        self.rest[-1] = (w[:, TOTAL:TOTAL + 1].contiguous(), b[TOTAL:TOTAL + 1].clone())  # only the total is asked

    def project(self, code: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A code's contribution to the first layer through the sum and the mean parts."""
        return code @ self.w_sum, code @ self.w_mean

    def log_total(self, sum_part: torch.Tensor, mean_total: torch.Tensor, largest: torch.Tensor,
                  count: torch.Tensor, added: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Log-ms totals from running projections: ``sum_part`` = sum of projected sums,
        ``mean_total`` = sum of projected means (divided by the count here); ``added``: one more
        table's (sum, mean) projections added to every set (its code is already in ``largest``)."""
        clamped = count.clamp(min=1.0)
        x = mean_total + added[1] if added is not None else mean_total.clone()
        x.div_(clamped.unsqueeze(1)).add_(sum_part)
        if added is not None:
            x.add_(added[0])
        x.addr_(clamped.log(), self.w_log).add_(self.first_bias)
        x = torch.addmm(x, largest, self.w_max)
        for w, b in self.rest:
            x = torch.addmm(b, functional.silu(x, inplace=True), w)
        return x[:, 0]


class SetAccumulator:
    """``num_sets`` sets, initially empty, on one cost model and batch size."""

    def __init__(self, model: NeuralCostModel, num_sets: int, batch_size: int) -> None:
        self.model, self.batch_size, self.head = model, batch_size, model.split_head
        width, hidden = model.network.config.table_code, self.head.hidden
        self.sum_part = torch.zeros(num_sets, hidden)
        self.mean_total = torch.zeros(num_sets, hidden)
        self.largest = torch.full((num_sets, width), -1e9)
        self.count = torch.zeros(num_sets)
        self.floor = np.zeros(num_sets)  # each set's costliest table alone (``cost_model.predictor``'s floor)
        self._projected: dict[Table, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _code(self, table: Table) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(code, its sum projection, its mean projection), cached per table."""
        found = self._projected.get(table)
        if found is None:
            code = torch.from_numpy(self.model.code_array(table, self.batch_size)).float()
            found = self._projected[table] = (code, *self.head.project(code))
        return found

    def _cost(self, sum_part: torch.Tensor, mean_total: torch.Tensor, largest: torch.Tensor, count: torch.Tensor,
              added: tuple[torch.Tensor, torch.Tensor] | None = None) -> np.ndarray:
        with torch.inference_mode():
            log_ms = self.head.log_total(sum_part, mean_total, largest, count, added).numpy()
        cost = np.exp(np.clip(log_ms.astype(np.float64), LOG_MS_MIN, LOG_MS_MAX))
        return np.where(count.numpy() > 0, cost, 0.0)

    def costs(self) -> np.ndarray:
        return np.maximum(self._cost(self.sum_part, self.mean_total, self.largest, self.count), self.floor)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        """Each set's total ms with ``table`` added (only the sets ``rows``, if given)."""
        code, s, m = self._code(table)
        alone = self._alone(table)
        if rows is None:
            cost = self._cost(self.sum_part, self.mean_total, torch.maximum(self.largest, code), self.count + 1, (s, m))
            return np.maximum(cost, np.maximum(self.floor, alone))
        index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        pick = lambda t: t.index_select(0, index)  # noqa: E731
        cost = self._cost(pick(self.sum_part), pick(self.mean_total), torch.maximum(pick(self.largest), code),
                          pick(self.count) + 1, (s, m))
        return np.maximum(cost, np.maximum(self.floor[rows], alone))

    def _alone(self, table: Table) -> float:
        return float(self.model.alone_ms([table], self.batch_size)[0])

    def add(self, set_index: int, table: Table) -> None:
        code, s, m = self._code(table)
        self.sum_part[set_index] += s
        self.mean_total[set_index] += m
        torch.maximum(self.largest[set_index], code, out=self.largest[set_index])
        self.count[set_index] += 1
        self.floor[set_index] = max(self.floor[set_index], self._alone(table))
