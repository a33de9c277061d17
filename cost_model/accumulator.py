"""Running pooled codes of several sets, for planners that grow sets one table at a time.

Greedy placement asks, for every table, "what would each device cost with this table added?".
The set network's pooled input (sum, count and max of the per-table codes) updates in O(width)
per added table, and the head is a small MLP, so both run in numpy: one call scores every
device in a few tens of microseconds, instead of rebuilding and re-encoding the sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autoshard.types import Table

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel


class NumpyHead:
    """The network's head (Linear + SiLU layers) as numpy arrays, for a few rows at a time."""

    def __init__(self, head) -> None:  # a torch nn.Sequential of Linear / SiLU (/ Dropout)
        import torch

        self.layers = [(m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy().copy())
                       for m in head if isinstance(m, torch.nn.Linear)]

    def __call__(self, pooled: np.ndarray) -> np.ndarray:
        x = pooled
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = x / (1.0 + np.exp(-x))  # SiLU
        return x


class SetAccumulator:
    """``num_sets`` sets, initially empty, on one cost model and batch size."""

    def __init__(self, model: NeuralCostModel, num_sets: int, batch_size: int) -> None:
        self.model, self.batch_size = model, batch_size
        width = model.network.config.table_code
        self.total = np.zeros((num_sets, width))
        self.largest = np.full((num_sets, width), -1e9)
        self.count = np.zeros(num_sets)

    def _code(self, table: Table) -> np.ndarray:
        return self.model.code_array(table, self.batch_size)

    def _cost(self, total: np.ndarray, count: np.ndarray, largest: np.ndarray) -> np.ndarray:
        clamped = np.maximum(count, 1.0)[:, None]
        pooled = np.concatenate([total / 8.0, total / clamped, largest, np.log(clamped)], axis=1)
        cost = np.exp(self.model.numpy_head(pooled)[:, 2])
        return np.where(count > 0, cost, 0.0)

    def costs(self) -> np.ndarray:
        return self._cost(self.total, self.count, self.largest)

    def costs_if_added(self, table: Table) -> np.ndarray:
        """Each set's total ms with ``table`` added."""
        code = self._code(table)
        return self._cost(self.total + code, self.count + 1, np.maximum(self.largest, code))

    def add(self, set_index: int, table: Table) -> None:
        code = self._code(table)
        self.total[set_index] += code
        self.largest[set_index] = np.maximum(self.largest[set_index], code)
        self.count[set_index] += 1
