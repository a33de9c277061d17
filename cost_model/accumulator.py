"""Running pooled codes of several sets, for planners that grow sets one table at a time.

Greedy placement and the RL environment ask, for every table, "what would each device cost with
this table added?". The head's input is ``[sum / 8, mean, max, log n]`` of the set's table codes
(``cost_model.network.pooled_input``), and its first layer is linear: the sum and mean parts
are projected through it once per table (cached on the head, across placements) and kept as
running sums, so scoring D devices costs only the max part's projection and the rest of the head.
The bookkeeping is numpy (a few microseconds an operation on a handful of rows); the matmuls
are torch (float32, one thread, no autograd), which is faster at these shapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn import functional

from autoshard.types import Table
from cost_model.network import LOG_MS_MAX, LOG_MS_MIN, OUTPUTS, linear_scale

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel

TOTAL = OUTPUTS.index("total")


class SplitHead:
    """The network's head (Linear + SiLU layers) with its first layer split by the parts of
    ``pooled_input``: ``[sum / 8 | mean | max | log n]``, each ``width`` wide."""

    def __init__(self, head: torch.nn.Sequential, width: int) -> None:
        layers = [(m.weight.detach().float().T.contiguous(), m.bias.detach().float().clone())
                  for m in head if isinstance(m, torch.nn.Linear)]
        (first, first_bias), self.rest = layers[0], layers[1:]
        self.hidden = first.shape[1]
        self.w_sum, self.w_mean = (first[:width] / 8.0).numpy(), first[width:2 * width].numpy()
        self.w_max = first[2 * width:3 * width].contiguous()
        self.w_log, self.first_bias = first[3 * width].numpy(), first_bias.numpy()
        w, b = self.rest[-1]
        self.rest[-1] = (w[:, TOTAL:TOTAL + 1].contiguous(), b[TOTAL:TOTAL + 1].clone())  # only the total is asked
        self._projected: dict[tuple[Table, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def projected(self, model: NeuralCostModel, table: Table, batch_size: int,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(code, its projection through the sum part, through the mean part), float32, cached."""
        key = (table, batch_size)
        found = self._projected.get(key)
        if found is None:
            if len(self._projected) >= 200_000:
                self._projected.clear()
            code = model.code_array(table, batch_size).astype(np.float32)
            found = self._projected[key] = (code, code @ self.w_sum, code @ self.w_mean)
        return found

    def ms(self, first: np.ndarray, largest: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Total milliseconds from the first layer's input without its max part (``first``,
        ``[n, hidden]``), the max-pooled codes (``largest``, ``[n, width]``) and each set's
        ``linear_scale`` (``[n]``)."""
        with torch.inference_mode():
            x = torch.addmm(torch.from_numpy(first), torch.from_numpy(largest), self.w_max)
            for w, b in self.rest:
                x = torch.addmm(b, functional.silu(x, inplace=True), w)
            log_ms = x[:, 0].numpy().astype(np.float64)
        return np.exp(np.clip(log_ms + np.log(scale), LOG_MS_MIN, LOG_MS_MAX))


class SetAccumulator:
    """``num_sets`` sets, initially empty, on one cost model and batch size. Costs are floored
    at each set's costliest table alone, as ``NeuralCostModel`` floors them."""

    def __init__(self, model: NeuralCostModel, num_sets: int, batch_size: int) -> None:
        self.model, self.batch_size, self.head = model, batch_size, model.split_head
        width, hidden = model.network.config.table_code, self.head.hidden
        self.limit = model.size_limit
        self.sums = np.zeros((num_sets, hidden), dtype=np.float32)  # projected sums of the sum part
        self.means = np.zeros((num_sets, hidden), dtype=np.float32)  # projected sums of the mean part
        self.largest = np.full((num_sets, width), -1e9, dtype=np.float32)
        self.count = np.zeros(num_sets)
        self.floor = np.zeros(num_sets)

    def _ms(self, rows: np.ndarray | slice, count: np.ndarray, largest: np.ndarray,
            added: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """The head's total ms for sets ``rows`` holding ``count`` tables (with ``added``'s
        projections, if given), priced linearly past the size limit as ``predict_pooled`` does."""
        n = np.maximum(count, 1.0).astype(np.float32)
        scale = np.ones_like(n) if self.limit is None else linear_scale(n, self.limit)
        sums, means = self.sums[rows], self.means[rows]
        if added is not None:
            sums, means = sums + added[0], means + added[1]
        first = (self.head.first_bias + sums / scale[:, None] + means / n[:, None]
                 + np.log(n / scale)[:, None] * self.head.w_log)
        return self.head.ms(first, largest, scale)

    def costs(self) -> np.ndarray:
        cost = self._ms(slice(None), self.count, self.largest)
        return np.where(self.count > 0, np.maximum(cost, self.floor), 0.0)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        """Each set's total ms with ``table`` added (only the sets ``rows``, if given)."""
        code, s, m = self.head.projected(self.model, table, self.batch_size)
        at = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        cost = self._ms(at, self.count[at] + 1, np.maximum(self.largest[at], code), (s, m))
        return np.maximum(cost, np.maximum(self.floor[at], self._alone(table)))

    def _alone(self, table: Table) -> float:
        return float(self.model.alone_ms([table], self.batch_size)[0])

    def add(self, set_index: int, table: Table) -> None:
        code, s, m = self.head.projected(self.model, table, self.batch_size)
        self.sums[set_index] += s
        self.means[set_index] += m
        np.maximum(self.largest[set_index], code, out=self.largest[set_index])
        self.count[set_index] += 1
        self.floor[set_index] = max(self.floor[set_index], self._alone(table))
