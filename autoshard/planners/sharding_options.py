"""Each table's sharding options on a topology, and the spread ones placed before the rest.

A table-wise, column-wise or table-column-wise table goes to devices the placement chooses one
shard at a time (``place_loop``; the type its shards take: ``placed_kind``). The other sharding
types fix their devices once the option is chosen: a
``row_wise`` table or a ``data_parallel`` replica uses every device; a ``table_row_wise`` or
``grid_shard`` table uses every device of the host chosen for it. ``spread_options`` lists a
table's options of those kinds; ``place_spread`` places the chosen ones, heaviest first, each
on the option (and host) that leaves the lowest max load, before the rest are placed around
them (``PlacementState(fixed=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, TableShard, Topology, replica, row_shards
from autoshard.planners.feasibility import FIX_DEVICES, FIX_MEMORY, FIX_SHRINK, fmt_bytes
from autoshard.planners.placement_unit import CostFn, Unit

ALL_TYPES = frozenset(ShardingType)
SPREAD_TYPES = frozenset(
    {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD, ShardingType.DATA_PARALLEL}
)
ROW_TYPES = frozenset({ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD})
"""Sharding types that split a table's rows: a table larger than any device fits under them."""
PLACED_TYPES = frozenset({ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE})
"""Sharding types whose shards the placement loop puts one by one."""
COLUMN_TYPES = frozenset({ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE})
DP_MEMORY_SHARE = 0.005
"""A data-parallel candidate's replica takes at most this share of the smallest device: a replica
lives on every device, so only tiny tables are worth it."""
GRID_MIN_COLUMNS = 4


def must_spread(kinds: frozenset[ShardingType]) -> bool:
    """A table whose constraints forbid placing it whole, and allow a spread type."""
    return ShardingType.TABLE_WISE not in kinds and bool(kinds & SPREAD_TYPES)


def placed_kind(kinds: frozenset[ShardingType]) -> ShardingType | None:
    """The sharding type the placement loop's shards of a table take under ``kinds`` (its
    allowed types): ``None`` where table_wise is allowed (a whole table is table_wise, a column
    slice column_wise: ``TableShard.sharding_type``); else column_wise, where allowed (a whole
    table is one column block), else table_column_wise (its column blocks on one host). A
    table_column_wise table costs what a column_wise one of the same blocks does (TorchRec's
    estimator prices them alike), and column_wise places its blocks anywhere, so it wins by cost
    wherever both are allowed; table_column_wise is the type of tables that allow it and not
    column_wise."""
    return None if ShardingType.TABLE_WISE in kinds else column_kind(kinds)


def column_kind(kinds: frozenset[ShardingType]) -> ShardingType | None:
    """The type a table's column blocks take under ``kinds``: column_wise where allowed, else
    table_column_wise where allowed, else ``None`` (it may not be cut column-wise)."""
    if ShardingType.COLUMN_WISE in kinds:
        return ShardingType.COLUMN_WISE
    if ShardingType.TABLE_COLUMN_WISE in kinds:
        return ShardingType.TABLE_COLUMN_WISE
    return None


@dataclass(frozen=True, slots=True)
class SpreadOption:
    """A table under a sharding type that fixes its devices: its shards, each on its rank."""

    table: Table
    sharding_type: ShardingType
    placements: tuple[tuple[int, TableShard], ...]
    host: int | None = None

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(r for r, _ in self.placements)


def _host_ranks(topology: Topology, host: int) -> range:
    size = topology.local_world_size
    return range(host * size, (host + 1) * size)


def spread_options(
    table: Table,
    topology: Topology,
    allowed: Iterable[ShardingType] = ALL_TYPES,
    max_grid_ways: int | None = None,
    min_width: int | None = None,
) -> list[SpreadOption]:
    """``table``'s options under the spread types ``allowed`` on ``topology``: row_wise over every
    device; table_row_wise on each host; grid_shard as TorchRec cuts it: 2, 4, ... equal column
    blocks (at least ``GRID_MIN_COLUMNS`` wide), block c row-sharded over the devices of host
    h + c (one option per first host h); data_parallel everywhere. Options that would leave
    a device without rows (fewer rows than devices) are left out; memory is not checked here.
    ``max_grid_ways``: grid options of at most that many column blocks (default: every count);
    ``min_width``: the narrowest column block (the table's ``min_partition``). Where grid_shard
    is allowed and table_row_wise not, grid also offers one column block row-sharded over a host
    (as TorchRec's planner cuts a grid table whose blocks are as wide as the table): the only
    grid option on one host."""
    allowed = set(allowed)
    world, local = topology.world_size, topology.local_world_size
    found: list[SpreadOption] = []
    if world < 2:  # one device: a replica is the only spread option (what a constraint may ask for)
        if ShardingType.DATA_PARALLEL in allowed:
            found.append(SpreadOption(table, ShardingType.DATA_PARALLEL, ((0, replica(table, 1)),)))
        return found
    rows, dim = table.num_embeddings, table.embedding_dim
    if ShardingType.ROW_WISE in allowed and rows >= world:
        shards = row_shards(table, world, ShardingType.ROW_WISE)
        if len(shards) == world:
            found.append(SpreadOption(table, ShardingType.ROW_WISE, tuple(enumerate(shards))))
    hosts = range(topology.num_hosts)
    if ShardingType.TABLE_ROW_WISE in allowed and local > 1 and rows >= local:
        shards = row_shards(table, local, ShardingType.TABLE_ROW_WISE)
        if len(shards) == local:
            for h in hosts:
                ranks = _host_ranks(topology, h)
                found.append(SpreadOption(table, ShardingType.TABLE_ROW_WISE, tuple(zip(ranks, shards)), h))
    if ShardingType.GRID_SHARD in allowed and local > 1 and rows >= local:
        ways = 2 if ShardingType.TABLE_ROW_WISE in allowed else 1
        most = topology.num_hosts if max_grid_ways is None else min(max_grid_ways, topology.num_hosts)
        narrowest = max(GRID_MIN_COLUMNS, min_width or 1)
        while ways <= most and dim % ways == 0 and (ways == 1 or dim // ways >= narrowest):
            width = dim // ways
            for first in hosts:
                placed = []
                for c in range(ways):  # column block c, row-sharded over host first + c
                    ranks = _host_ranks(topology, (first + c) % topology.num_hosts)
                    shards = row_shards(table, local, ShardingType.GRID_SHARD, c * width, width)
                    placed += list(zip(ranks, shards))
                if len(placed) == ways * local:
                    found.append(SpreadOption(table, ShardingType.GRID_SHARD, tuple(placed), first))
            ways *= 2
    if ShardingType.DATA_PARALLEL in allowed:
        found.append(
            SpreadOption(table, ShardingType.DATA_PARALLEL, tuple((r, replica(table, world)) for r in range(world)))
        )
    return found


def place_spread(
    tables: Sequence[Table],
    options_of: Callable[[Table], Sequence[SpreadOption]],
    topology: Topology,
    cost_fn: CostFn,
    free: np.ndarray | None = None,
) -> tuple[tuple[int, Unit], ...]:
    """Place ``tables`` under spread options: heaviest first (by their cost alone, whole), each on
    its option whose shards leave the lowest max of the devices' summed costs alone (ties: fewer
    devices, then the order of ``options_of``), among those whose shards fit the devices' ``free``
    bytes (default: every device's memory). Returns the units, each with its rank.
    ``PlannerError`` naming a table that no option fits."""
    free = np.array(topology.device_memory_bytes_all, dtype=np.int64) if free is None else free.copy()
    loads = np.zeros(topology.world_size)
    whole = dict(zip((t.name for t in tables), cost_fn(tables))) if tables else {}
    ordered = sorted(tables, key=lambda t: (-whole[t.name], t.name))
    options = [list(options_of(t)) for t in ordered]  # one batched call below prices every distinct shard
    distinct = {s: None for found in options for o in found for _, s in o.placements}  # hosts share shapes
    shards = list(distinct)
    unit_of = dict(zip(shards, map(Unit.of, shards, cost_fn([s.as_table for s in shards]) if shards else ())))
    priced: list[tuple[Table, list[tuple[SpreadOption, list[Unit]]]]] = []
    for table, found in zip(ordered, options):
        option_units = [[unit_of[s] for _, s in o.placements] for o in found]
        priced.append((table, list(zip(found, option_units))))
    placed: list[tuple[int, Unit]] = []
    for table, choices in priced:
        best: tuple[float, int, int] | None = None
        best_choice: tuple[SpreadOption, list[Unit]] | None = None
        for index, (option, units) in enumerate(choices):
            ranks = np.array(option.ranks)
            need = np.zeros(topology.world_size, dtype=np.int64)
            added = np.zeros(topology.world_size)
            np.add.at(need, ranks, [u.memory_bytes for u in units])
            np.add.at(added, ranks, [u.cost for u in units])
            if (need > free).any():
                continue
            key = (float((loads + added).max()), len(set(option.ranks)), index)
            if best is None or key < best:
                best, best_choice = key, (option, units)
        if best_choice is None:
            raise _no_option_error(table, choices, topology, free)
        option, units = best_choice
        for (rank, _), unit in zip(option.placements, units):
            free[rank] -= unit.memory_bytes
            loads[rank] += unit.cost
            placed.append((rank, unit))
    return tuple(placed)


def _no_option_error(
    table: Table, choices: Sequence[tuple[SpreadOption, list[Unit]]], topology: Topology, free: np.ndarray
) -> PlannerError:
    if not choices:
        what = f"table {table.name!r} ({fmt_bytes(table.memory_bytes)}) fits under no allowed sharding type"
    else:
        smallest = min(max(u.memory_bytes for u in units) for _, units in choices)
        what = (
            f"table {table.name!r} ({fmt_bytes(table.memory_bytes)}) fits under no sharding type: its smallest "
            f"shard needs {fmt_bytes(smallest)}, the largest free space is {fmt_bytes(int(free.max()))}"
        )
    return PlannerError(
        PlannerErrorKind.TABLE_DOES_NOT_FIT,
        what,
        (FIX_DEVICES, FIX_MEMORY, "allow row_wise or table_row_wise sharding for it", FIX_SHRINK),
    )


__all__ = [
    "ALL_TYPES",
    "COLUMN_TYPES",
    "PLACED_TYPES",
    "ROW_TYPES",
    "SPREAD_TYPES",
    "SpreadOption",
    "column_kind",
    "place_spread",
    "placed_kind",
    "spread_options",
]
