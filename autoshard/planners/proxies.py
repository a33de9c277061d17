"""The proxy costs of the classic heuristics (DreamShard / AutoShard / NeuroShard baselines), and
an additive cost model built from any of them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.core.costing import SetCostModel
from autoshard.core.types import Table

Proxy = Callable[[Table], float]


def size_proxy(table: Table) -> float:
    """Memory bytes (weights + optimizer state)."""
    return float(table.memory_bytes)


def dim_proxy(table: Table) -> float:
    return float(table.embedding_dim)


def lookup_proxy(table: Table) -> float:
    """Embedding values read per sample: dim x pooling factor."""
    return table.embedding_dim * table.pooling_factor


def size_lookup_proxy(table: Table) -> float:
    """dim x pooling x log10(rows); log10 is floored at 1e-3 so a 1-row table is not free."""
    return lookup_proxy(table) * max(math.log10(table.num_embeddings), 1e-3)


PROXIES: dict[str, Proxy] = {
    "size_greedy": size_proxy,
    "dim_greedy": dim_proxy,
    "lookup_greedy": lookup_proxy,
    "size_lookup_greedy": size_lookup_proxy,
}


@dataclass(frozen=True)
class ProxyCostModel(SetCostModel):
    """A CostModel whose device cost is the sum of a proxy over its tables (units of the proxy,
    not milliseconds): the yardstick when no trained cost model is available."""

    proxy: Proxy = lookup_proxy
    batch_free = True  # a proxy per sample: a replica's as_table already holds its 1 / W share

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        return [float(sum(self.proxy(t) for t in tables)) for tables in table_sets]
