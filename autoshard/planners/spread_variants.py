"""Which tables cost_greedy spreads (row-wise, table-row-wise, grid, data parallel), tried as a
few variants that each plan the rest of the workload around them.

- ``needed``: tables that fit no device whole (nor, where column splits are allowed, as column
  shards of up to one per device): they must be spread, in every variant.
- ``heavy``: tables whose cost alone exceeds the even share of the workload's cost alone: a
  device that holds one is the max device, and a row split divides its lookups where a column
  split does not.
- ``tiny``: tables whose replica takes at most ``DP_MEMORY_SHARE`` of the smallest device and
  whose replicas together cost less than the table alone (data parallel removes its all-to-all).

The variants are: needed; needed + heavy; needed + tiny; needed + heavy + tiny (each only where
it differs from the ones before). The planner keeps the variant with the lowest predicted max.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.core.constraints import Constraints
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload, replica
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_unit import CostFn
from autoshard.planners.sharding_options import COLUMN_TYPES, DP_MEMORY_SHARE, SpreadOption, must_spread, spread_options


@dataclass(frozen=True, slots=True)
class SpreadVariant:
    """The tables to spread, each with its options."""

    name: str
    tables: tuple[Table, ...]
    replicated: frozenset[str]  # the tables to place data parallel (the rest: row-sharded)

    def options_of(
        self,
        topology: Topology,
        allowed: frozenset[ShardingType],
        constraints: Constraints = Constraints(),
        rules: PlacementRules | None = None,
    ) -> Callable[[Table], Sequence[SpreadOption]]:
        """Each table's options: a replica for the replicated ones, else its row-splitting types,
        within the types its constraints allow and on the ranks its pin allows."""

        def options(table: Table) -> Sequence[SpreadOption]:
            kinds = constraints.allowed_types(table.name, allowed)
            replicated = table.name in self.replicated or not kinds - {ShardingType.DATA_PARALLEL}
            kinds = kinds & {ShardingType.DATA_PARALLEL} if replicated else kinds - {ShardingType.DATA_PARALLEL}
            own = constraints.of(table.name)
            found = spread_options(table, topology, kinds, min_width=own.min_partition if own else None)
            return [o for o in found if rules is None or rules.ranks_allowed(table.name, o.ranks)]

        return options


def fits_placed(table: Table, topology: Topology, allow_split: bool, allowed: frozenset[ShardingType]) -> bool:
    """Whether ``table`` fits a device whole (table-wise, or as one column-wise block), or as
    column shards of up to one per device (of a host, for table_column_wise alone)."""
    capacity = topology.device_memory_bytes
    placed = allowed & (COLUMN_TYPES | {ShardingType.TABLE_WISE})
    if placed and table.memory_bytes <= capacity:
        return True
    if not (allow_split and allowed & COLUMN_TYPES):
        return False
    devices = topology.num_devices if ShardingType.COLUMN_WISE in allowed else topology.local_world_size
    ways = min(devices, table.embedding_dim)
    return table.memory_bytes * math.ceil(table.embedding_dim / ways) / table.embedding_dim <= capacity


def spread_variants(
    workload: Workload,
    topology: Topology,
    cost_fn: CostFn,
    allow_split: bool,
    allowed: frozenset[ShardingType],
) -> list[SpreadVariant]:
    """The variants to try (see the module docstring); empty when no table needs or may gain from
    a spread type (the plan is then the placed one alone)."""
    spreadable = allowed & {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD}
    if topology.num_devices < 2 and not workload.constraints:
        return []
    tables, constraints = workload.tables, workload.constraints
    kinds = {t.name: constraints.allowed_types(t.name, allowed) for t in tables}
    needed = [
        t
        for t in tables
        if (spreadable and not fits_placed(t, topology, allow_split, kinds[t.name])) or must_spread(kinds[t.name])
    ]
    costs = cost_fn(tables)
    share = sum(costs) / topology.num_devices
    free = [t for t in tables if t.name not in constraints.placed_tables and t not in needed]  # may spread or not
    heavy = [t for t, c in zip(tables, costs) if c > share and t in free and kinds[t.name] & spreadable]
    tiny: list[Table] = []
    if ShardingType.DATA_PARALLEL in allowed:
        small = [t for t in free if t.memory_bytes <= DP_MEMORY_SHARE * topology.smallest_device_memory_bytes]
        small = [t for t in small if t not in heavy and ShardingType.DATA_PARALLEL in kinds[t.name]]
        if small:
            replicas = cost_fn([replica(t, topology.world_size).as_table for t in small])
            alone = dict(zip((t.name for t in tables), costs))
            tiny = [t for t, c in zip(small, replicas) if topology.world_size * c < alone[t.name]]
    variants = [SpreadVariant("needed", tuple(needed), frozenset())] if needed else []
    if heavy:
        variants.append(SpreadVariant("needed+heavy", tuple(needed + heavy), frozenset()))
    if tiny:
        names = frozenset(t.name for t in tiny)
        variants.append(SpreadVariant("needed+tiny", tuple(needed + tiny), names))
        if heavy:
            variants.append(SpreadVariant("needed+heavy+tiny", tuple(needed + heavy + tiny), names))
    return variants


__all__ = ["SpreadVariant", "fits_placed", "spread_variants"]
