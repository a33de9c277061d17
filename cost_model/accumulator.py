"""Running pooled codes of several sets, for planners that grow sets one table at a time.

Greedy placement and the RL environment ask, for every table, "what would each device cost with
this table added?". The head's input is ``[sum / 8, mean, max, log n]`` of the set's table codes
(``cost_model.network.pooled_input``), and its first layer is linear: the sum and mean parts
are projected through it once per table and kept as running sums, so scoring D devices costs
only the max part's projection and the rest of the head, in float32 numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autoshard.types import Table
from cost_model.network import LOG_MS_MAX, LOG_MS_MIN

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class NumpyHead:
    """The network's head (Linear + SiLU layers) as float32 numpy arrays, its first layer split
    by the parts of ``pooled_input``: ``[sum / 8 | mean | max | log n]``, each ``width`` wide."""

    def __init__(self, head, width: int) -> None:  # a torch nn.Sequential of Linear / SiLU (/ Dropout)
        import torch

        layers = [(m.weight.detach().float().numpy().T.copy(), m.bias.detach().float().numpy().copy())
                  for m in head if isinstance(m, torch.nn.Linear)]
        (first, self.first_bias), self.rest = layers[0], layers[1:]
        self.first = first
        self.w_sum, self.w_mean = first[:width] / 8.0, first[width:2 * width]
        self.w_max, self.w_log = first[2 * width:3 * width], first[3 * width]

    def _finish(self, x: np.ndarray) -> np.ndarray:
        for w, b in self.rest:
            x = _silu(x) @ w + b
        return x

    def __call__(self, pooled: np.ndarray) -> np.ndarray:
        """Head outputs for pooled inputs ``[sets, 3 width + 1]``."""
        return self._finish(pooled.astype(np.float32) @ self.first + self.first_bias)

    def project(self, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A code's contribution to the first layer through the sum and the mean parts."""
        return code @ self.w_sum, code @ self.w_mean

    def from_parts(self, sum_part: np.ndarray, mean_total: np.ndarray, largest: np.ndarray,
                   count: np.ndarray) -> np.ndarray:
        """Head outputs from running projections: ``sum_part`` = sum of projected sums,
        ``mean_total`` = sum of projected means (divided by the count here)."""
        clamped = np.maximum(count, 1.0)[:, None].astype(np.float32)
        x = sum_part + mean_total / clamped + largest @ self.w_max + np.log(clamped) * self.w_log + self.first_bias
        return self._finish(x)


class SetAccumulator:
    """``num_sets`` sets, initially empty, on one cost model and batch size."""

    def __init__(self, model: NeuralCostModel, num_sets: int, batch_size: int) -> None:
        self.model, self.batch_size, self.head = model, batch_size, model.numpy_head
        width, hidden = model.network.config.table_code, self.head.first.shape[1]
        self.sum_part = np.zeros((num_sets, hidden), dtype=np.float32)
        self.mean_total = np.zeros((num_sets, hidden), dtype=np.float32)
        self.largest = np.full((num_sets, width), -1e9, dtype=np.float32)
        self.count = np.zeros(num_sets)
        self._projected: dict[Table, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _code(self, table: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(code, its sum projection, its mean projection), cached per table."""
        found = self._projected.get(table)
        if found is None:
            code = self.model.code_array(table, self.batch_size).astype(np.float32)
            found = self._projected[table] = (code, *self.head.project(code))
        return found

    def _cost(self, sum_part: np.ndarray, mean_total: np.ndarray, largest: np.ndarray,
              count: np.ndarray) -> np.ndarray:
        log_ms = self.head.from_parts(sum_part, mean_total, largest, count)[:, 2].astype(np.float64)
        cost = np.exp(np.clip(np.nan_to_num(log_ms, nan=LOG_MS_MAX), LOG_MS_MIN, LOG_MS_MAX))
        return np.where(count > 0, cost, 0.0)

    def costs(self) -> np.ndarray:
        return self._cost(self.sum_part, self.mean_total, self.largest, self.count)

    def costs_if_added(self, table: Table) -> np.ndarray:
        """Each set's total ms with ``table`` added."""
        code, s, m = self._code(table)
        return self._cost(self.sum_part + s, self.mean_total + m, np.maximum(self.largest, code), self.count + 1)

    def add(self, set_index: int, table: Table) -> None:
        code, s, m = self._code(table)
        self.sum_part[set_index] += s
        self.mean_total[set_index] += m
        self.largest[set_index] = np.maximum(self.largest[set_index], code)
        self.count[set_index] += 1

