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

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Table, TableShard, Topology, replica, row_shards
from autoshard.planners.feasibility import FIX_DEVICES, FIX_MEMORY, FIX_SHRINK, fmt_bytes
from autoshard.planners.placement_unit import CostFn, Unit, model_costs

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
    """A table under a sharding type that fixes its devices: its shards, each on its rank.

    ``blocks``: the shards in runs on consecutive ranks, ``(first rank, shards)`` each; the
    options of one type share their runs' shard tuples across hosts, so that pricing one
    prices them all (``place_spread``)."""

    table: Table
    sharding_type: ShardingType
    blocks: tuple[tuple[int, tuple[TableShard, ...]], ...]
    host: int | None = None

    @property
    def placements(self) -> tuple[tuple[int, TableShard], ...]:
        """Each shard with its rank, in the order of ``blocks``."""
        return tuple(p for first, shards in self.blocks for p in zip(range(first, first + len(shards)), shards))

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(r for first, shards in self.blocks for r in range(first, first + len(shards)))


@dataclass(frozen=True, slots=True)
class _Memo:
    """What ``spread_option_memo`` keeps: each question's options, each shard object's unit
    (by its ``id``; the entry keeps the shard alive) under the cost function that priced it, and
    each run of shards' units with their costs and memory as arrays (likewise, by the run's)."""

    options: dict[tuple[object, ...], tuple[SpreadOption, ...]] = field(default_factory=dict)
    units: dict[int, tuple[TableShard, CostFn, Unit]] = field(default_factory=dict)
    runs: dict[int, tuple[tuple[TableShard, ...], CostFn, _Run]] = field(default_factory=dict)
    cost_fns: dict[tuple[int, int], tuple[CostModel, CostFn]] = field(default_factory=dict)


def spread_costs(cost_model: CostModel, batch_size: int) -> CostFn:
    """``model_costs(cost_model, batch_size)``; within ``spread_option_memo`` one function per model
    and batch, so that the units it priced are known to later spread stages of the same model."""
    memo = _current()
    if memo is None:
        return model_costs(cost_model, batch_size)
    key = (id(cost_model), batch_size)
    found = memo.cost_fns.get(key)
    if found is None or found[0] is not cost_model:
        found = memo.cost_fns[key] = (cost_model, model_costs(cost_model, batch_size))
    return found[1]


_local = threading.local()  # its ``memo``: each thread's own (the service plans in threads)


def _current() -> _Memo | None:
    return getattr(_local, "memo", None)


@contextmanager
def spread_option_memo() -> Iterator[None]:
    """Within it, ``spread_options`` answers a question asked before from memory, and
    ``place_spread`` prices a shard it priced before from memory (a task's spread stage asks for
    the same tables' options once per variant); the memory goes with it."""
    outer = _current()
    _local.memo = _Memo() if outer is None else outer
    try:
        yield
    finally:
        _local.memo = outer


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
    allowed = frozenset(allowed)
    memo = _current()
    if memo is None:
        return list(_spread_options(table, topology, allowed, max_grid_ways, min_width))
    # the options depend on the topology's shape alone (not its memory: memory_fit's passes share them)
    key = (table, topology.num_hosts, topology.devices_per_host, allowed, max_grid_ways, min_width)
    if key not in memo.options:
        memo.options[key] = _spread_options(table, topology, allowed, max_grid_ways, min_width)
    return list(memo.options[key])


def _spread_options(
    table: Table,
    topology: Topology,
    allowed: frozenset[ShardingType],
    max_grid_ways: int | None,
    min_width: int | None,
) -> tuple[SpreadOption, ...]:
    """``spread_options``, each type's shards cut once and shared by its options on every host."""
    world, local = topology.world_size, topology.local_world_size
    found: list[SpreadOption] = []
    if world < 2:  # one device: a replica is the only spread option (what a constraint may ask for)
        if ShardingType.DATA_PARALLEL in allowed:
            found.append(SpreadOption(table, ShardingType.DATA_PARALLEL, ((0, (replica(table, 1),)),)))
        return tuple(found)
    rows, dim = table.num_embeddings, table.embedding_dim
    if ShardingType.ROW_WISE in allowed and rows >= world:
        shards = row_shards(table, world, ShardingType.ROW_WISE)
        if len(shards) == world:
            found.append(SpreadOption(table, ShardingType.ROW_WISE, ((0, shards),)))
    hosts = range(topology.num_hosts)
    if ShardingType.TABLE_ROW_WISE in allowed and local > 1 and rows >= local:
        shards = row_shards(table, local, ShardingType.TABLE_ROW_WISE)
        if len(shards) == local:
            for h in hosts:
                found.append(SpreadOption(table, ShardingType.TABLE_ROW_WISE, ((h * local, shards),), h))
    if ShardingType.GRID_SHARD in allowed and local > 1 and rows >= local:
        ways = 2 if ShardingType.TABLE_ROW_WISE in allowed else 1
        most = topology.num_hosts if max_grid_ways is None else min(max_grid_ways, topology.num_hosts)
        narrowest = max(GRID_MIN_COLUMNS, min_width or 1)
        base = row_shards(table, local, ShardingType.GRID_SHARD)  # each column block's row blocks: these, sliced
        while len(base) == local and ways <= most and dim % ways == 0 and (ways == 1 or dim // ways >= narrowest):
            width = dim // ways
            columns = [tuple(replace(s, column_offset=c * width, columns=width) for s in base) for c in range(ways)]
            for first in hosts:  # column block c, row-sharded over host first + c
                blocks = tuple(((first + c) % topology.num_hosts * local, columns[c]) for c in range(ways))
                found.append(SpreadOption(table, ShardingType.GRID_SHARD, blocks, first))
            ways *= 2
    if ShardingType.DATA_PARALLEL in allowed:
        found.append(SpreadOption(table, ShardingType.DATA_PARALLEL, ((0, (replica(table, world),) * world),)))
    return tuple(found)


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
    ``PlannerError`` naming a table that no option fits.

    A table's options are priced together, as arrays over options x devices; each distinct
    shard is priced once (one batched call), each run of shards shared by several options once."""
    free = np.array(topology.device_memory_bytes_all, dtype=np.int64) if free is None else free.copy()
    loads = np.zeros(topology.world_size)
    whole = dict(zip((t.name for t in tables), cost_fn(tables))) if tables else {}
    ordered = sorted(tables, key=lambda t: (-whole[t.name], t.name))
    options = [list(options_of(t)) for t in ordered]
    runs = _RunPrices(options, cost_fn)
    placed: list[tuple[int, Unit]] = []
    for table, found in zip(ordered, options):
        chosen = _best_option(found, runs, loads, free)
        if chosen is None:
            choices = [(o, [u for _, run in o.blocks for u in runs.units[id(run)]]) for o in found]
            raise _no_option_error(table, choices, topology, free)
        for first, run in found[chosen].blocks:
            units = runs.units[id(run)]
            at = slice(first, first + len(units))
            free[at] -= runs.memory[id(run)]
            loads[at] += runs.cost[id(run)]
            placed += zip(range(first, first + len(units)), units)
    return tuple(placed)


@dataclass(frozen=True, slots=True)
class _Run:
    """A run of shards' units, with their costs and memory as (read-only) arrays."""

    units: list[Unit]
    cost: np.ndarray
    memory: np.ndarray


class _RunPrices:
    """The units of each run of shards (``SpreadOption.blocks``) of ``options``, by the run's
    ``id``, with their costs and memory as arrays; every distinct shard priced once. Within
    ``spread_option_memo`` a run met before (the variants place the same tables' options) is
    taken whole from it."""

    def __init__(self, options: Sequence[Sequence[SpreadOption]], cost_fn: CostFn) -> None:
        self.runs = {id(run): run for found in options for o in found for _, run in o.blocks}
        memo = _current()
        known_runs = memo.runs if memo is not None else {}
        self.units: dict[int, list[Unit]] = {}
        self.cost: dict[int, np.ndarray] = {}
        self.memory: dict[int, np.ndarray] = {}
        new_runs = {}
        for key, run in self.runs.items():
            entry = known_runs.get(key)
            if entry is not None and entry[0] is run and entry[1] is cost_fn:
                self.units[key], self.cost[key], self.memory[key] = entry[2].units, entry[2].cost, entry[2].memory
            else:
                new_runs[key] = run
        if not new_runs:
            return
        by_id = {id(s): s for run in new_runs.values() for s in run}  # runs share shard objects
        known = memo.units if memo is not None else {}
        unit_by_id = {
            key: entry[2] for key, entry in ((k, known.get(k)) for k in by_id) if entry and entry[1] is cost_fn
        }
        new = [s for key, s in by_id.items() if key not in unit_by_id]
        distinct = list(dict.fromkeys(new))  # equal shards of distinct objects priced once
        costs = cost_fn([s.as_table for s in distinct]) if distinct else []
        unit_of = dict(zip(distinct, map(Unit.of, distinct, costs)))
        for shard in new:
            unit_by_id[id(shard)] = unit = unit_of[shard]
            if memo is not None:
                memo.units[id(shard)] = (shard, cost_fn, unit)
        for key, run in new_runs.items():
            units = [unit_by_id[id(s)] for s in run]
            cost = np.array([u.cost for u in units])
            memory = np.array([u.memory_bytes for u in units], dtype=np.int64)
            cost.flags.writeable = memory.flags.writeable = False
            self.units[key], self.cost[key], self.memory[key] = units, cost, memory
            if memo is not None:
                memo.runs[key] = (run, cost_fn, _Run(units, cost, memory))


def _best_option(found: Sequence[SpreadOption], runs: _RunPrices, loads: np.ndarray, free: np.ndarray) -> int | None:
    """The index of ``place_spread``'s choice among ``found`` (None: none fits): the lowest max
    load after it, then the fewest devices, then the first."""
    if not found:
        return None
    world = len(loads)
    added = np.zeros((len(found), world))
    need = np.zeros((len(found), world), dtype=np.int64)
    covered = np.zeros((len(found), world), dtype=bool)
    uses: dict[int, tuple[list[int], list[int]]] = {}  # each run: the options using it, and where it starts
    for o, option in enumerate(found):
        for first, run in option.blocks:
            at, starts = uses.setdefault(id(run), ([], []))
            at.append(o)
            starts.append(first)
    for key, (at, starts) in uses.items():
        rows = np.array(at)[:, None]
        columns = np.array(starts)[:, None] + np.arange(len(runs.units[key]))[None, :]
        np.add.at(added, (rows, columns), runs.cost[key][None, :])
        np.add.at(need, (rows, columns), runs.memory[key][None, :])
        covered[rows, columns] = True
    fits = np.flatnonzero(~(need > free).any(axis=1))
    if not len(fits):
        return None
    peak = (loads + added[fits]).max(axis=1)
    width = covered[fits].sum(axis=1)
    return int(fits[np.lexsort((fits, width, peak))[0]])


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
    "spread_costs",
    "spread_option_memo",
    "spread_options",
]
