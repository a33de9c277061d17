"""The simpler cost estimators the neural model must beat, fitted on the same training traces.

1. ``SumOfSingles``: the sum of the tables' measured single-table costs (additivity).
2. ``LinearAggregate``: least squares on aggregate features of the set (sums of lookups, bytes
   read, distinct rows' bytes, table count).
3. ``BandwidthEstimator``: TorchRec ``EmbeddingPerfEstimator`` style: forward = bytes read and
   written / bandwidth, backward = a multiple of forward, plus a fixed kernel overhead, with the
   bandwidths and overheads calibrated on the training traces.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from autoshard.types import Table
from cost_model.dataset import Labelled
from cost_model.features import expected_unique_rows


class Estimator(Protocol):
    name: str

    def fit(self, train: Sequence[Labelled]) -> "Estimator": ...

    def predict(self, sets: Sequence[Sequence[Table]]) -> np.ndarray: ...


class SumOfSingles:
    name = "sum_of_singles"

    def __init__(self, singles: dict[str, float]) -> None:
        self.singles = singles

    def fit(self, train: Sequence[Labelled]) -> "SumOfSingles":
        return self

    def covers(self, tables: Sequence[Table]) -> bool:
        return all(t.name in self.singles for t in tables)

    def predict(self, sets: Sequence[Sequence[Table]]) -> np.ndarray:
        return np.array([sum(self.singles[t.name] for t in s) for s in sets])


def _table_terms(t: Table, batch_size: int, row_cap_bytes: int) -> tuple[float, float, float, float]:
    """(bytes read by forward, bytes written as output, bytes of distinct rows updated, lookups)."""
    lookups = batch_size * t.pooling_factor
    phys = max(1, min(t.num_embeddings, row_cap_bytes // (t.embedding_dim * 4)))
    row_bytes = t.embedding_dim * t.bytes_per_element
    unique = expected_unique_rows(phys, t.zipf_alpha, lookups)
    return lookups * (row_bytes + 8), batch_size * t.embedding_dim * 4, unique * row_bytes, lookups


class _LeastSquares:
    """Shared fitting: non-negative least squares of the label on a design matrix of each set."""

    name = "least_squares"

    def __init__(self, batch_size: int, row_cap_bytes: int) -> None:
        self.batch_size, self.row_cap_bytes = batch_size, row_cap_bytes
        self.coef: np.ndarray | None = None

    def design(self, tables: Sequence[Table]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, train: Sequence[Labelled]) -> "_LeastSquares":
        from scipy.optimize import nnls
        X = np.stack([self.design(s.tables) for s in train])
        y = np.array([s.total_ms for s in train])
        scale = 1.0 / y  # fit relative error, the quantity reported (MAPE)
        self.coef, _ = nnls(X * scale[:, None], y * scale)
        return self

    def predict(self, sets: Sequence[Sequence[Table]]) -> np.ndarray:
        assert self.coef is not None, "fit() first"
        return np.stack([self.design(s) for s in sets]) @ self.coef


class LinearAggregate(_LeastSquares):
    name = "linear_aggregate"

    def design(self, tables: Sequence[Table]) -> np.ndarray:
        terms = np.array([_table_terms(t, self.batch_size, self.row_cap_bytes) for t in tables]).sum(0)
        return np.array([1.0, len(tables), terms[0] / 1e6, terms[1] / 1e6, terms[2] / 1e6, terms[3] / 1e4])


class BandwidthEstimator(_LeastSquares):
    """cost = (read + output) / fwd_bw + bwd_mult * (read + output) / fwd_bw + updated / upd_bw + overheads."""

    name = "bandwidth_analytical"

    def design(self, tables: Sequence[Table]) -> np.ndarray:
        terms = np.array([_table_terms(t, self.batch_size, self.row_cap_bytes) for t in tables]).sum(0)
        # coefficients are 1/bandwidth for forward+backward traffic, 1/bandwidth of the update,
        # one kernel launch per set (fused) and a per-table overhead
        return np.array([(terms[0] + terms[1]) / 1e6, terms[2] / 1e6, 1.0, len(tables)])
