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
Every feature is finite for any L > 0, B >= 1: a pooling factor below 1 (a row block's or a
data-parallel replica's share of the lookups, ``TableShard.as_table``) gives negative logs, and
fewer than one lookup a batch a U below 1. With ``min_pooling`` (a model's trained minimum), a
table of a lower pooling factor is featurised at that minimum: fewer lookups never cost more, so
it is priced at an upper bound rather than by a network extrapolating in log L, which priced
L = 0.001 up to 25x L = 1 (``cost_model.ranges`` warns about such tables).
Features are standardised with statistics stored in the checkpoint. New features are appended,
never inserted: a network records how many it reads (``NetworkConfig.num_features``) and takes
the first that many, so a checkpoint trained before a feature existed still loads and predicts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoshard.core.types import Optimizer, Table

NUM_FEATURES = 15
_BUCKETS = 48
CACHED_TABLES = 25_000
"""How many (table, batch size) entries each per-table cache of a cost model keeps (features,
codes, costs alone, the head's projections) before it starts afresh. They live as long as the
process, a planning worker's as long as the server, and every distinct table a request brings
adds about 7 KB over all of them: this caps a process at about 170 MB, five times the largest
request (5,000 tables). A request that needs more keeps them all for its call."""


def keys_to_fill(cache: dict, keys: Sequence, limit: int) -> list:
    """The distinct ``keys`` that ``cache`` lacks, in order; if adding them would take it past
    ``limit``, it starts afresh and every distinct one of ``keys`` is to fill, so that a call
    never finds only some of its keys (a call that needs more than ``limit`` keeps them all)."""
    missing = [k for k in dict.fromkeys(keys) if k not in cache]
    if missing and len(cache) + len(missing) > limit:
        cache.clear()
        return list(dict.fromkeys(keys))
    return missing


def op_key(table: Table) -> tuple[int, Optimizer]:
    """What one TBE op groups by on a device: (bytes per element, optimizer), as TorchRec groups."""
    return table.bytes_per_element, table.optimizer


def expected_unique_rows(rows: int, alpha: float, draws: float) -> float:
    """Expected distinct rows among ``draws`` bounded-Zipf(alpha) draws over ``rows`` rows."""
    return float(expected_unique_rows_many(np.array([rows]), np.array([alpha]), np.array([draws]))[0])


def expected_unique_rows_many(rows: np.ndarray, alpha: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``expected_unique_rows`` of each (rows, alpha, draws), the tables of more than ``_BUCKETS``
    rows in one pass over ``[tables, _BUCKETS]`` rank buckets (a bucket that rounds to no rank
    has a count of 0 and adds nothing)."""
    rows, alpha, draws = (np.asarray(a, dtype=np.float64) for a in (rows, alpha, draws))
    out = np.empty(len(rows))
    for i in np.flatnonzero(rows <= _BUCKETS):  # every rank its own bucket
        ranks = np.arange(1, int(rows[i]) + 1, dtype=np.float64)
        out[i] = _unique(ranks[None, :], np.ones_like(ranks)[None, :], alpha[i : i + 1], draws[i : i + 1])[0]
    big = np.flatnonzero(rows > _BUCKETS)
    if len(big):
        edges = np.geomspace(1, rows[big] + 1, _BUCKETS + 1, axis=1).astype(np.int64)
        counts = np.diff(edges, axis=1).astype(np.float64)
        ranks = np.sqrt(edges[:, :-1] * np.maximum(edges[:, 1:] - 1, edges[:, :-1]))  # geometric midpoints
        out[big] = _unique(ranks, counts, alpha[big], draws[big])
    return out


def _unique(ranks: np.ndarray, counts: np.ndarray, alpha: np.ndarray, draws: np.ndarray) -> np.ndarray:
    weights = ranks ** -alpha[:, None]
    p = weights / (weights * counts).sum(1, keepdims=True)
    return (counts * -np.expm1(-draws[:, None] * p)).sum(1)


def table_features(table: Table, batch_size: int, row_cap_bytes: int, min_pooling: float | None = None) -> np.ndarray:
    """The raw (unstandardised) features of one table."""
    return table_features_many([table], batch_size, row_cap_bytes, min_pooling)[0]


def physical_rows(table: Table, row_cap_bytes: int) -> int:
    """The rows a benchmark builds the table with: all of them, up to ``row_cap_bytes`` of fp32
    weights (the harness's cap; the features see both the true and the built row count)."""
    return max(1, min(table.num_embeddings, row_cap_bytes // (table.embedding_dim * 4)))


def table_features_many(
    tables: Sequence[Table], batch_size: int, row_cap_bytes: int, min_pooling: float | None = None
) -> np.ndarray:
    """The raw features of each table, ``[len(tables), NUM_FEATURES]`` float32, in one pass; with
    ``min_pooling``, pooling factors below it count as it (see the module docstring)."""
    rows = np.array([t.num_embeddings for t in tables], dtype=np.float64)
    d = np.array([t.embedding_dim for t in tables], dtype=np.float64)
    b = np.array([t.bytes_per_element for t in tables], dtype=np.float64)
    L = np.array([t.pooling_factor for t in tables], dtype=np.float64)
    if min_pooling is not None:
        L = np.maximum(L, min_pooling)
    alpha = np.array([t.zipf_alpha for t in tables], dtype=np.float64)
    phys = np.array([physical_rows(t, row_cap_bytes) for t in tables], dtype=np.float64)
    lookups = batch_size * L
    unique = expected_unique_rows_many(phys, alpha, lookups)
    return np.stack(
        [
            np.log10(rows),
            np.log10(phys),
            np.log2(d),
            b / 4.0,
            np.log10(L),
            alpha,
            np.log10(lookups),
            np.log10(lookups * d * b),
            np.log10(unique),
            np.log10(unique * d * b),
            unique / phys,
            np.log10(phys * d * b),
            np.log10(batch_size * d),
            np.array([t.optimizer is Optimizer.ROWWISE_ADAGRAD for t in tables], dtype=np.float64),
            np.array([t.optimizer is Optimizer.ADAGRAD for t in tables], dtype=np.float64),
        ],
        axis=1,
    ).astype(np.float32)


class FeatureCache:
    """Memoised per-table features: planners and the RL env ask for the same tables again and again.
    ``min_pooling``: see ``table_features_many``; setting it empties the cache."""

    def __init__(self, row_cap_bytes: int, max_entries: int = CACHED_TABLES, min_pooling: float | None = None) -> None:
        self.row_cap_bytes, self.max_entries = row_cap_bytes, max_entries
        self._min_pooling = min_pooling
        self._cache: dict[tuple[Table, int], np.ndarray] = {}

    @property
    def min_pooling(self) -> float | None:
        return self._min_pooling

    @min_pooling.setter
    def min_pooling(self, value: float | None) -> None:
        if value != self._min_pooling:
            self._cache.clear()
        self._min_pooling = value

    def __call__(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        missing = [t for t, _ in keys_to_fill(self._cache, [(t, batch_size) for t in tables], self.max_entries)]
        if missing:  # computed in one pass
            for table, row in zip(
                missing, table_features_many(missing, batch_size, self.row_cap_bytes, self._min_pooling)
            ):
                self._cache[(table, batch_size)] = row
        out = np.empty((len(tables), NUM_FEATURES), dtype=np.float32)
        for i, table in enumerate(tables):
            out[i] = self._cache[(table, batch_size)]
        return out
