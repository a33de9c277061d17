"""Which tables cost_greedy spreads (row-wise, table-row-wise, grid, data parallel), tried as a
few variants that each plan the rest of the workload around them.

- ``needed``: tables that fit no device whole (nor, where column splits are allowed, as column
  shards of up to one per device): they must be spread, in every variant.
- ``heavy``: tables whose cost alone exceeds the even share of the workload's cost alone: a
  device that holds one is the max device, and a row split divides its lookups where a column
  split does not.
- ``tiny``: tables whose replica takes at most ``DP_MEMORY_SHARE`` of the smallest device and
  whose replicas together cost less than the table alone (data parallel removes its all-to-all).
- ``either``: the other tables that may be spread, costliest alone first, as many as
  ``EITHER_SHARD_BUDGET`` prices; each takes a replica, its host's row split or a grid of 2
  blocks, whichever leaves the lowest max device (``place_spread``), not the lowest total.
  Where a table whole costs more than a device's even share of the rest (few tables a device,
  as TorchRec's estimator prices any table-wise table's output), a replica or a row split that
  costs more in total still lowers the max device.
- ``cheap``: the ``either`` tables with an option whose shards cost less in sum than the table
  whole (spreading it takes work off the devices in total), each chosen as ``either`` chooses.

The variants are: needed; needed + heavy; needed + tiny; needed + heavy + tiny; needed + cheap;
needed + heavy + cheap; needed + heavy + either (the heavy tables there under any spread type, a
replica included), each only where its sets are not empty. The planner keeps the variant with
the lowest predicted max.

- ``crowded_out``: once a variant's tables are spread, the other tables that fit no device whole
  in the memory the spread shards leave. Where the variant's own plan then fails (its rest
  dead-ends beside the shards), the variant with them spread too, as the needed tables are (row
  splits; again until none is crowded out), is planned in its place (``spread_stage.Crowded``).
  With tables larger than a device (UVM caching under TorchRec's model), the needed tables' row
  splits can leave no device room for the next largest whole, and packing its column shards
  beside the rest can dead-end (docs/decisions.md, 68).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autoshard.core.constraints import Constraints
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload, replica
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_unit import CostFn
from autoshard.planners.sharding_options import (
    COLUMN_TYPES,
    DP_MEMORY_SHARE,
    SPREAD_TYPES,
    SpreadOption,
    must_spread,
    spread_options,
)

EITHER_GRID_WAYS = 2
"""A table that may be spread or not is offered grid_shard of 2 column blocks at most (each
row-sharded over a host: its lookups over 2 hosts at half the width)."""


def either_kinds(kinds: frozenset[ShardingType], topology: Topology) -> frozenset[ShardingType]:
    """The spread types (of ``kinds``) a table that may be spread or not chooses among: a
    replica, one row split (table_row_wise, on its host's links; row_wise where a host has one
    device or table_row_wise is not allowed) and grid_shard (of ``EITHER_GRID_WAYS`` blocks at
    most). row_wise over several hosts and wider grids stay the needed and heavy tables' options:
    pricing them for every table costs more than the search has (128 shards a row_wise table on
    16 x 8)."""
    row = ShardingType.TABLE_ROW_WISE
    if row not in kinds or topology.local_world_size < 2:
        row = ShardingType.ROW_WISE
    return kinds & {row, ShardingType.GRID_SHARD, ShardingType.DATA_PARALLEL}


@dataclass(frozen=True, slots=True)
class SpreadVariant:
    """The tables to spread, each with its options."""

    name: str
    tables: tuple[Table, ...]
    replicated: frozenset[str]  # the tables to place data parallel (the rest: row-sharded)
    either: frozenset[str] = frozenset()  # tables under ``either_kinds``: replicated or row-sharded
    any_type: frozenset[str] = frozenset()  # tables under any spread type, a replica included

    def spreading(self, more: Sequence[Table]) -> SpreadVariant:
        """This variant with ``more`` tables spread as the needed ones are (row splits)."""
        return replace(self, name=f"{self.name}+crowded", tables=self.tables + tuple(more))

    @property
    def key(self) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
        """What the variant spreads and how: two variants of one key plan alike."""
        return frozenset(t.name for t in self.tables), self.replicated, self.either, self.any_type

    def options_of(
        self,
        topology: Topology,
        allowed: frozenset[ShardingType],
        constraints: Constraints = Constraints(),
        rules: PlacementRules | None = None,
    ) -> Callable[[Table], Sequence[SpreadOption]]:
        """Each table's options: a replica for the replicated ones; every spread type for the
        ``any_type`` ones; ``either_kinds`` (grid of at most ``EITHER_GRID_WAYS`` blocks) for the
        ``either`` ones; else its row-splitting types; within the types its constraints allow
        and on the ranks its pin allows."""

        def options(table: Table) -> Sequence[SpreadOption]:
            kinds = constraints.allowed_types(table.name, allowed)
            grid_ways = None
            if table.name in self.any_type:
                kinds = kinds & SPREAD_TYPES
            elif table.name in self.either:
                kinds, grid_ways = either_kinds(kinds, topology), EITHER_GRID_WAYS
            elif table.name in self.replicated or not kinds - {ShardingType.DATA_PARALLEL}:
                kinds = kinds & {ShardingType.DATA_PARALLEL}
            else:
                kinds = kinds - {ShardingType.DATA_PARALLEL}
            own = constraints.of(table.name)
            width = own.min_partition if own else None
            found = spread_options(table, topology, kinds, max_grid_ways=grid_ways, min_width=width)
            if rules is None or table.name not in rules.pins:  # every option keeps its pin: none
                return found
            return [o for o in found if rules.ranks_allowed(table.name, o.ranks)]

        return options


def fits_placed(
    table: Table,
    topology: Topology,
    allow_split: bool,
    allowed: frozenset[ShardingType],
    capacity: int | None = None,
) -> bool:
    """Whether ``table`` fits a device whole (table-wise, or as one column-wise block), or as
    column shards of up to one per device (of a host, for table_column_wise alone), in
    ``capacity`` bytes a device (default: a device's memory)."""
    capacity = topology.device_memory_bytes if capacity is None else capacity
    placed = allowed & (COLUMN_TYPES | {ShardingType.TABLE_WISE})
    if placed and table.memory_bytes <= capacity:
        return True
    if not (allow_split and allowed & COLUMN_TYPES):
        return False
    devices = topology.num_devices if ShardingType.COLUMN_WISE in allowed else topology.local_world_size
    ways = min(devices, table.embedding_dim)
    return table.memory_bytes * math.ceil(table.embedding_dim / ways) / table.embedding_dim <= capacity


EITHER_SHARD_BUDGET = 1024
"""The most shards the either-variants price (a table's row split on its host, its grid of 2
blocks and its replica), the costliest tables alone first: a table far down that order is
small beside a device's share and placed whole well, and pricing every table's shards on
1,000 tables x 16 hosts of 8 costs seconds of TorchRec's estimator."""


def within_budget(tables: Sequence[Table], topology: Topology) -> list[Table]:
    """The first of ``tables`` (costliest first) whose shards to price fit ``EITHER_SHARD_BUDGET``."""
    each = 3 * max(topology.local_world_size, 1) + 1  # row split, grid of 2 blocks, replica
    return list(tables[: max(EITHER_SHARD_BUDGET // each, 1)])


def cheaper_spread(
    tables: Sequence[Table],
    topology: Topology,
    cost_fn: CostFn,
    kinds: dict[str, frozenset[ShardingType]],
    whole: dict[str, float],
) -> list[Table]:
    """The ``tables`` with a spread option (of their allowed ``kinds``) whose shards cost less in
    sum than the table whole: spreading them takes work off the devices in total (on an additive
    cost model, where a row shard or replica is cheaper than its share of the table); ``whole``:
    each table's cost alone. Hosts share shard shapes, so each type and width is priced once
    (one batched call)."""
    shapes: list[tuple[Table, list[Table]]] = []
    for table in tables:
        seen: set[tuple[ShardingType, int]] = set()
        either = either_kinds(kinds[table.name], topology)
        for option in spread_options(table, topology, either, max_grid_ways=EITHER_GRID_WAYS):
            key = (option.sharding_type, len(option.placements))
            if key not in seen:
                seen.add(key)
                shapes.append((table, [shard.as_table for _, shard in option.placements]))
    if not shapes:
        return []
    distinct = list({t: None for _, shards in shapes for t in shards})
    price = dict(zip(distinct, cost_fn(distinct)))
    cheapest: dict[str, float] = {}
    for table, shards in shapes:
        summed = sum(price[t] for t in shards)
        cheapest[table.name] = min(cheapest.get(table.name, math.inf), summed)
    return [t for t in tables if cheapest.get(t.name, math.inf) < whole[t.name]]


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
    alone = dict(zip((t.name for t in tables), costs))
    share = sum(costs) / topology.num_devices
    free = [t for t in tables if t.name not in constraints.placed_tables and t not in needed]  # may spread or not
    heavy = [t for t, c in zip(tables, costs) if c > share and t in free and kinds[t.name] & spreadable]
    tiny: list[Table] = []
    if ShardingType.DATA_PARALLEL in allowed:
        small = [t for t in free if t.memory_bytes <= DP_MEMORY_SHARE * topology.smallest_device_memory_bytes]
        small = [t for t in small if t not in heavy and ShardingType.DATA_PARALLEL in kinds[t.name]]
        if small:
            replicas = cost_fn([replica(t, topology.world_size).as_table for t in small])
            tiny = [t for t, c in zip(small, replicas) if topology.world_size * c < alone[t.name]]
    variants = [SpreadVariant("needed", tuple(needed), frozenset())] if needed else []
    if heavy:
        variants.append(SpreadVariant("needed+heavy", tuple(needed + heavy), frozenset()))
    if tiny:
        names = frozenset(t.name for t in tiny)
        variants.append(SpreadVariant("needed+tiny", tuple(needed + tiny), names))
        if heavy:
            variants.append(SpreadVariant("needed+heavy+tiny", tuple(needed + heavy + tiny), names))
    unsure = {t.name for t in free} - {t.name for t in heavy}
    costliest = sorted((t for t in tables if t.name in unsure), key=lambda t: (-alone[t.name], t.name))
    either = within_budget([t for t in costliest if either_kinds(kinds[t.name], topology)], topology)
    cheap = cheaper_spread(either, topology, cost_fn, kinds, alone)
    if cheap:
        names = frozenset(t.name for t in cheap)
        variants.append(SpreadVariant("needed+cheap", tuple(needed + cheap), frozenset(), names))
        if heavy:
            variants.append(SpreadVariant("needed+heavy+cheap", tuple(needed + heavy + cheap), frozenset(), names))
    if either or heavy:
        names = frozenset(t.name for t in either)
        heavy_names = frozenset(t.name for t in heavy)
        variants.append(
            SpreadVariant("needed+heavy+either", tuple(needed + heavy + either), frozenset(), names, heavy_names)
        )
    return variants


def crowded_out(
    rest: Sequence[Table],
    free: Sequence[int],
    topology: Topology,
    allowed: frozenset[ShardingType],
    constraints: Constraints = Constraints(),
) -> list[Table]:
    """The ``rest`` tables (those a variant leaves placed) that fit no device whole in the most
    ``free`` bytes any device has beside the spread shards, and that may be row-split (not pinned
    by a placement constraint): the variant with them spread too is planned (module docstring).
    Column shards might still fit; the variant as it is stays planned for them."""
    room = max(free, default=0)
    spreadable = {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD}
    crowded = []
    for table in rest:
        kinds = constraints.allowed_types(table.name, allowed)
        if table.name in constraints.placed_tables or not kinds & spreadable:
            continue
        if not fits_placed(table, topology, False, kinds, room):
            crowded.append(table)
    return crowded


__all__ = ["SpreadVariant", "crowded_out", "fits_placed", "spread_variants"]
