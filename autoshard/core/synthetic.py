"""Seeded pools of production-like synthetic tables, and DreamShard-style task sampling.

Distributions (per table, independent):
- rows: log-uniform on [10^2, 10^7.6] (heavy tail: half the tables under ~63k rows, some ~40M);
- dim: one of 4..256 (powers of two), mostly 16-128;
- pooling factor: 30% one-hot, else log-normal (median ~2.7, sigma 1.5) clipped to [1, 500];
  or, with ``pooling`` (low, high), log-uniform on it and never one-hot (a pool of heavy tables:
  the multi-hot giants that plans split, such as Criteo Terabyte's);
- access skew: Zipf alpha uniform on [0, 1.4].
The dims and the one-hot share can be set (``PoolConfig``: e.g. a Criteo-like pool, every table
one-hot, of dims 8-32).
The pool splits into a train pool and a test pool, so that tables of the test pool are never seen
in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoshard.core.errors import InputError
from autoshard.core.types import Table, Workload

DIMS = (4, 8, 16, 32, 64, 128, 256)
DIM_WEIGHTS = (0.05, 0.10, 0.20, 0.20, 0.20, 0.15, 0.10)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """``dims``: draw each table's dim uniformly from these (default: ``DIMS`` with
    ``DIM_WEIGHTS``); ``one_hot_share``: the share of tables with pooling factor 1 (Criteo's
    tables are all one-hot, of dims 16-128); ``pooling``: (low, high) draws every table's pooling
    factor log-uniformly from it instead (``one_hot_share`` then does not apply)."""

    size: int = 500
    test_fraction: float = 0.2
    seed: int = 0
    min_log10_rows: float = 2.0
    max_log10_rows: float = 7.6
    max_zipf_alpha: float = 1.4
    dims: tuple[int, ...] = ()
    one_hot_share: float = 0.3
    pooling: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.size < 2:
            raise InputError("size", f"must be >= 2, got {self.size}", "use a larger pool")
        if not 0 < self.test_fraction < 1:
            raise InputError("test_fraction", f"must be in (0, 1), got {self.test_fraction}")
        if any(not isinstance(d, int) or d < 1 for d in self.dims):
            raise InputError("dims", f"must be positive integers, got {self.dims!r}", "e.g. 16,32,64")
        if not 0 <= self.one_hot_share <= 1:
            raise InputError("one_hot_share", f"must be in [0, 1], got {self.one_hot_share}")
        if self.pooling is not None and not (len(self.pooling) == 2 and 1 <= self.pooling[0] <= self.pooling[1]):
            raise InputError("pooling", f"must be two numbers 1 <= low <= high, got {self.pooling!r}", "e.g. 10,200")


@dataclass(frozen=True, slots=True)
class TablePool:
    train: tuple[Table, ...]
    test: tuple[Table, ...]

    @property
    def all(self) -> tuple[Table, ...]:
        return self.train + self.test

    def split_of(self, table_name: str) -> str:
        return "test" if table_name in {t.name for t in self.test} else "train"


def generate_table(name: str, rng: np.random.Generator, config: PoolConfig = PoolConfig()) -> Table:
    rows = int(round(10 ** rng.uniform(config.min_log10_rows, config.max_log10_rows)))
    dim = int(rng.choice(config.dims) if config.dims else rng.choice(DIMS, p=DIM_WEIGHTS))
    if config.pooling is None:
        one_hot = rng.random() < config.one_hot_share
        pooling = 1.0 if one_hot else float(np.clip(round(rng.lognormal(1.0, 1.5), 1), 1.0, 500.0))
    else:
        low, high = np.log(config.pooling)
        pooling = round(float(np.exp(rng.uniform(low, high))), 1)
    alpha = round(float(rng.uniform(0.0, config.max_zipf_alpha)), 2)
    return Table(name, rows, dim, pooling, alpha)


def generate_pool(config: PoolConfig = PoolConfig()) -> TablePool:
    """A deterministic pool for ``config.seed``, split into train and test tables."""
    rng = np.random.default_rng(config.seed)
    tables = [generate_table(f"syn{config.seed}_{i:04d}", rng, config) for i in range(config.size)]
    order = rng.permutation(config.size)
    n_test = max(1, int(round(config.size * config.test_fraction)))
    test = tuple(tables[i] for i in sorted(order[:n_test]))
    train = tuple(tables[i] for i in sorted(order[n_test:]))
    return TablePool(train, test)


def sample_task(
    tables: tuple[Table, ...], num_tables: int, rng: np.random.Generator, batch_size: int = 2048, name: str = "task"
) -> Workload:
    """Draw ``num_tables`` distinct tables from a pool (DreamShard's task protocol)."""
    if not 1 <= num_tables <= len(tables):
        raise InputError(
            "num_tables", f"must be in [1, {len(tables)}], got {num_tables}", "draw fewer tables or use a larger pool"
        )
    picked = rng.choice(len(tables), size=num_tables, replace=False)
    return Workload(tuple(tables[i] for i in picked), batch_size, name)
