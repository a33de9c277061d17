"""Placement units: a table, or one column shard of it, with its cost alone (proxy or predicted)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Table, TableShard

CostFn = Callable[[Sequence[Table]], list[float]]
"""The cost of each table alone, in one batched call."""


@dataclass(frozen=True, slots=True)
class Unit:
    """One thing to place. ``table`` is the shard as a table (what costs depend on); ``parent``
    names the workload table it belongs to."""

    shard: TableShard
    cost: float
    table: Table
    memory_bytes: int
    fixed: bool = False  # a table under a placement constraint: local search leaves it where it is

    def __hash__(self) -> int:
        # the name and cost alone (equal units have equal tables): the derived hash walked the
        # shard's table and the table again, field by field, and planning hashes units in sets
        return hash((self.table.name, self.cost))

    @classmethod
    def of(cls, shard: TableShard, cost: float, fixed: bool = False) -> Unit:
        table = shard.as_table
        return cls(shard, float(cost), table, table.memory_bytes, fixed)

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def parent(self) -> str:
        return self.shard.table.name

    @property
    def movable(self) -> bool:
        """Whether local search may move it alone: a table- or column-wise shard; the shards of
        the other sharding types sit where their option put them (``sharding_options``; a
        table_column_wise block where its host is), and a table under a placement constraint
        where the constraint put it (``placement_rules``)."""
        return self.shard.sharding in (None, ShardingType.COLUMN_WISE) and not self.fixed


def proxy_costs(proxy: Callable[[Table], float]) -> CostFn:
    return lambda tables: [float(proxy(t)) for t in tables]


def model_costs(cost_model: CostModel, batch_size: int) -> CostFn:
    """Single-table predictions, one ``predict_many`` call per batch of tables."""
    return lambda tables: [float(c) for c in cost_model.predict_many([[t] for t in tables], batch_size)]
