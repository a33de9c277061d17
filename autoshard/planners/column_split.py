"""Column-wise splitting of tables too costly (or too large) for one device."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, TableShard, Topology
from autoshard.planners.placement_unit import CostFn, Unit

MIN_SHARD_WIDTH = 4

T = TypeVar("T")


def split_ways(dim: int, max_ways: int) -> list[int]:
    """2, 4, 8, ... shards while each is at least 4 columns, a multiple of 4, and at most
    ``max_ways`` (shards of one table go to distinct devices)."""
    ways, k = [], 2
    while k <= max_ways and dim % k == 0 and (dim // k) % MIN_SHARD_WIDTH == 0:
        ways.append(k)
        k *= 2
    return ways


def split_units(
    units: Sequence[Unit],
    cost_fn: CostFn,
    topology: Topology,
    memory_limit: int | None = None,
    max_ways: int | None = None,
    frozen: int = 0,
    whole: frozenset[str] = frozenset(),
    min_width: Mapping[str, int] | None = None,
    kinds: Mapping[str, ShardingType] | None = None,
    memo: dict[Hashable, Any] | None = None,
) -> list[Unit]:
    """Split each whole-table unit whose cost exceeds a level, or whose memory exceeds
    ``memory_limit`` (default: a device's memory), into the fewest shards at or under both; if
    none are, into as many as allowed (at most ``max_ways``, default D). The level is the
    average device load (total / D), or, where higher, the cost of the costliest unit at its
    cheapest (whole, or split as it may be): no plan's max is below it, so a cheaper shard would
    lower no max. Shard costs come from one ``cost_fn`` call. The first ``frozen`` units stay as
    they are (a deployed plan's shards, ``incremental.replan``), and count towards the level; so
    do the tables named in ``whole`` (constraints keep them whole); ``min_width``: per table, the
    narrowest shard its constraints allow (TorchRec's ``min_partition``); ``kinds``: per table, the
    sharding type its column shards take when not column_wise (table_column_wise). ``memo``: the
    candidate shards and split units of earlier calls on the same task's units (by name), made
    once (``TaskUnits``: every split cap and retry splits the same tables); priced each call."""
    average = sum(u.cost for u in units) / topology.num_devices
    max_ways = topology.num_devices if max_ways is None else min(max_ways, topology.num_devices)
    capacity = topology.device_memory_bytes if memory_limit is None else memory_limit
    options: dict[int, list[tuple[int, Table]]] = {}
    for i, unit in enumerate(units):
        if i >= frozen and unit.parent not in whole and (unit.cost > average or unit.memory_bytes > capacity):
            dim = unit.table.embedding_dim
            narrowest = (min_width or {}).get(unit.parent, MIN_SHARD_WIDTH)
            ways = [k for k in split_ways(dim, max_ways) if dim // k >= narrowest]
            if ways:
                options[i] = [(k, _kept(memo, (unit.name, k), lambda: _candidate(unit, dim // k))) for k in ways]
    if not options:
        return list(units)
    candidates = [table for opts in options.values() for _, table in opts]
    costs = iter(cost_fn(candidates))
    priced = {i: [(k, table, next(costs)) for k, table in opts] for i, opts in options.items()}
    # no plan's max is below the costliest unit at its cheapest (whole, or its cheapest split: a
    # shard still pays every lookup, so the finest is not always the cheapest); a shard cheaper
    # than that lowers no max, and adds a shard's lookups
    level = max(
        [
            average,
            *(min(units[i].cost, *(p[2] for p in found)) for i, found in priced.items()),
            *(u.cost for i, u in enumerate(units) if i not in options and u.cost > average),
        ]
    )
    out: list[Unit] = []
    for i, unit in enumerate(units):
        if i not in options or (unit.cost <= level and unit.memory_bytes <= capacity):
            out.append(unit)  # whole: it fits, and no cheaper shard could lower the max
            continue
        k, table, cost = next((p for p in priced[i] if p[2] <= level and p[1].memory_bytes <= capacity), priced[i][-1])
        kind = (kinds or {}).get(unit.parent)
        out.extend(_kept(memo, (unit.name, k, kind, cost), lambda: _shards(unit, table.embedding_dim, k, kind, cost)))
    return out


def _kept(memo: dict[Hashable, Any] | None, key: Hashable, make: Callable[[], T]) -> T:
    """``make()``, once under ``key`` in ``memo`` (each call without one)."""
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]  # type: ignore[no-any-return]


def _candidate(unit: Unit, width: int) -> Table:
    """``unit``'s table's first column shard ``width`` wide, as a table (what its split costs)."""
    return TableShard(unit.shard.table, 0, width).as_table


def _shards(unit: Unit, width: int, ways: int, kind: ShardingType | None, cost: float) -> tuple[Unit, ...]:
    """``unit``'s table split into ``ways`` column shards ``width`` wide, each costing ``cost``."""
    return tuple(Unit.of(TableShard(unit.shard.table, j * width, width, sharding=kind), cost) for j in range(ways))
