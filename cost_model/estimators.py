"""The simpler cost estimators the neural model must beat, fitted on the same training traces.

1. ``SumOfSingles``: the sum of the tables' measured single-table costs (additivity), each scaled
   linearly from the batch size it was measured at to the set's.
2. ``LinearAggregate``: least squares on aggregate features of the set (sums of lookups, bytes
   read, distinct rows' bytes, table count).
3. ``BandwidthEstimator``: TorchRec ``EmbeddingPerfEstimator`` style: forward = bytes read and
   written / bandwidth, backward = a multiple of forward, plus a fixed kernel overhead, with the
   bandwidths and overheads calibrated on the training traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from autoshard.core.types import Table
from cost_model.dataset import Labelled
from cost_model.features import expected_unique_rows
from cost_model.traces.store import Sample


class Estimator(Protocol):
    name: str

    def fit(self, train: Sequence[Labelled]) -> Estimator: ...

    def predict(self, sets: Sequence[Sequence[Table]], batch_sizes: Sequence[int]) -> np.ndarray: ...


class SumOfSingles:
    name = "sum_of_singles"

    def __init__(self, singles: dict[str, Sample]) -> None:
        self.singles = singles

    def fit(self, train: Sequence[Labelled]) -> SumOfSingles:
        return self

    def covers(self, tables: Sequence[Table]) -> bool:
        return all(t.name in self.singles for t in tables)

    def predict(self, sets: Sequence[Sequence[Table]], batch_sizes: Sequence[int]) -> np.ndarray:
        alone = lambda t, batch: self.singles[t.name].cost_ms * batch / self.singles[t.name].batch_size  # noqa: E731
        return np.array([sum(alone(t, batch) for t in s) for s, batch in zip(sets, batch_sizes)])


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

    def __init__(self, row_cap_bytes: int) -> None:
        self.row_cap_bytes = row_cap_bytes
        self.coef: np.ndarray | None = None

    def design(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def terms(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        return np.array([_table_terms(t, batch_size, self.row_cap_bytes) for t in tables]).sum(0)

    def fit(self, train: Sequence[Labelled]) -> _LeastSquares:
        from scipy.optimize import nnls

        X = np.stack([self.design(s.tables, s.batch_size) for s in train])
        y = np.array([s.total_ms for s in train])
        scale = 1.0 / y  # fit relative error, the quantity reported (MAPE)
        self.coef, _ = nnls(X * scale[:, None], y * scale)
        return self

    def predict(self, sets: Sequence[Sequence[Table]], batch_sizes: Sequence[int]) -> np.ndarray:
        assert self.coef is not None, "fit() first"
        return np.stack([self.design(s, b) for s, b in zip(sets, batch_sizes)]) @ self.coef


class LinearAggregate(_LeastSquares):
    name = "linear_aggregate"

    def design(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        terms = self.terms(tables, batch_size)
        return np.array([1.0, len(tables), terms[0] / 1e6, terms[1] / 1e6, terms[2] / 1e6, terms[3] / 1e4])


class BandwidthEstimator(_LeastSquares):
    """cost = (read + output) / fwd_bw + bwd_mult * (read + output) / fwd_bw + updated / upd_bw + overheads."""

    name = "bandwidth_analytical"

    def design(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        terms = self.terms(tables, batch_size)
        # coefficients are 1/bandwidth for forward+backward traffic, 1/bandwidth of the update,
        # one kernel launch per set (fused) and a per-table overhead
        return np.array([(terms[0] + terms[1]) / 1e6, terms[2] / 1e6, 1.0, len(tables)])
