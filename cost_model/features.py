"""Per-table features of the neural cost model.

For a table at batch size B, with R rows of which R' are benchmarked (the trace's row cap), dim d,
b bytes per element, pooling factor L and Zipf skew a, the features are:

 0 log10 R            nominal rows
 1 log10 R'           rows the device really touches (after the row cap)
 2 log2 d             dimension
 3 b / 4              bytes per element
 4 log10 L            pooling factor
 5 a                  access skew (Zipf alpha)
 6 log10 (B L)        lookups per batch
 7 log10 (B L d b)    bytes read by forward
 8 log10 U            expected distinct rows touched per batch (bounded Zipf, see below)
 9 log10 (U d b)      bytes written by the sparse update
10 U / R'             share of the table touched per batch
11 log10 (R' d b)     benchmarked table bytes (vs the cache)
12 log10 (B d)        pooled output elements
13 [row-wise Adagrad] 1 if the table trains with EXACT_ROWWISE_ADAGRAD (one fp32 state per row)
14 [Adagrad]          1 if the table trains with EXACT_ADAGRAD (a state per element); both 0: SGD

U = sum_i 1 - exp(-B L p_i) with p_i ~ i^-a over R' ranks, summed over log-spaced rank buckets.
Features are standardised with statistics stored in the checkpoint. New features are appended,
never inserted: a network records how many it reads (``NetworkConfig.num_features``) and takes
the first that many, so a checkpoint trained before a feature existed still loads and predicts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from autoshard.types import Optimizer, Table

NUM_FEATURES = 15
_BUCKETS = 48


def op_key(table: Table) -> tuple[int, Optimizer]:
    """What one TBE op groups by on a device: (bytes per element, optimizer), as TorchRec groups."""
    return table.bytes_per_element, table.optimizer


def expected_unique_rows(rows: int, alpha: float, draws: float) -> float:
    """Expected distinct rows among ``draws`` bounded-Zipf(alpha) draws over ``rows`` rows."""
    if rows <= _BUCKETS:
        ranks = np.arange(1, rows + 1, dtype=np.float64)
        counts = np.ones_like(ranks)
    else:
        edges = np.unique(np.geomspace(1, rows + 1, _BUCKETS + 1).astype(np.int64))
        counts = np.diff(edges).astype(np.float64)
        ranks = np.sqrt(edges[:-1] * np.maximum(edges[1:] - 1, edges[:-1]))  # geometric midpoints
    weights = ranks ** -alpha
    p = weights / float((weights * counts).sum())
    return float((counts * -np.expm1(-draws * p)).sum())


def table_features(table: Table, batch_size: int, row_cap_bytes: int) -> np.ndarray:
    """The raw (unstandardised) features of one table."""
    rows = table.num_embeddings
    phys = max(1, min(rows, row_cap_bytes // (table.embedding_dim * 4)))
    d, b, L = table.embedding_dim, table.bytes_per_element, table.pooling_factor
    lookups = batch_size * L
    unique = expected_unique_rows(phys, table.zipf_alpha, lookups)
    return np.array([
        np.log10(rows), np.log10(phys), np.log2(d), b / 4.0, np.log10(L), table.zipf_alpha,
        np.log10(lookups), np.log10(lookups * d * b), np.log10(unique), np.log10(unique * d * b),
        unique / phys, np.log10(phys * d * b), np.log10(batch_size * d),
        float(table.optimizer is Optimizer.ROWWISE_ADAGRAD), float(table.optimizer is Optimizer.ADAGRAD),
    ], dtype=np.float32)


class FeatureCache:
    """Memoised per-table features: planners and the RL env ask for the same tables again and again."""

    def __init__(self, row_cap_bytes: int, max_entries: int = 200_000) -> None:
        self.row_cap_bytes, self.max_entries = row_cap_bytes, max_entries
        self._cache: dict[tuple[Table, int], np.ndarray] = {}

    def __call__(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        out = np.empty((len(tables), NUM_FEATURES), dtype=np.float32)
        for i, table in enumerate(tables):
            key = (table, batch_size)
            row = self._cache.get(key)
            if row is None:
                if len(self._cache) >= self.max_entries:
                    self._cache.clear()
                row = self._cache[key] = table_features(table, batch_size, self.row_cap_bytes)
            out[i] = row
        return out
