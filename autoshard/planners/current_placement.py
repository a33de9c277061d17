"""The plan running today, as re-planning reads it (``incremental.replans``): each table's shards
with their ranks, and each table's sharding type and compute kernel (``CurrentPlacement``), read
from an ``autoshard plan --format torchrec`` export or a re-plan's ``placement``.

``kept_tables`` says which of them a re-plan keeps, as shards of the workload's tables:

- table-, column- and table-column-wise tables: shards that tile the table's columns on distinct
  devices, in a form the table's constraints allow (``replan_constraints.keeps``); local search
  may move them;
- row-wise, table-row-wise and grid tables and data-parallel replicas (the spread types): shards
  that are TorchRec's layout of that type on the new topology (row_wise: a row block on each of
  the world's ranks; table_row_wise: one on each rank of a host; grid_shard: each column block as
  table_row_wise; data_parallel: a replica on every rank), of a type the table's constraints allow.
  They stay where they are: local search moves table- and column-wise shards alone, as it does in
  every planner (``Unit.movable``). A spread table whose layout no longer holds (the world or
  the hosts changed) is placed anew, whole or in column blocks, like a table whose columns changed.

Each kept table runs its current kernel (and cache load factor) where the cost model chooses
kernels (TorchRec's: ``autoshard.planning.replan``): moving a table between HBM and host memory
is a reshard too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import (
    FUSED,
    FUSED_UVM_CACHING,
    TABLE_KERNELS,
    Table,
    TableShard,
    Topology,
    Workload,
    replica,
    row_shards,
)
from autoshard.core.values import is_number
from autoshard.planners.replan_constraints import keeps, shard_of
from autoshard.planners.sharding_options import ALL_TYPES, PLACED_TYPES

_FIX = "pass a file written by `autoshard plan ... --format torchrec --out FILE`"
_INT_KEYS = ("rank", "column_offset", "columns")


@dataclass(frozen=True, slots=True)
class KeptShard:
    """Rows ``[row_offset, row_offset + rows)`` (``rows`` None: all of them) of the column slice
    ``[column_offset, column_offset + columns)`` of table ``table`` on device ``rank``."""

    table: str
    rank: int
    column_offset: int
    columns: int
    row_offset: int = 0
    rows: int | None = None


@dataclass(frozen=True, slots=True)
class TableLayout:
    """How the current plan runs one table: its sharding type (TorchRec's), its compute kernel
    and, under ``fused_uvm_caching``, its cache load factor (None: TorchRec's default)."""

    sharding_type: ShardingType = ShardingType.TABLE_WISE
    compute_kernel: str = FUSED
    cache_load_factor: float | None = None


_DEFAULT_LAYOUT = TableLayout()


@dataclass(frozen=True, slots=True)
class CurrentPlacement:
    """Where a deployed plan's shards live (``from_export``: an ``autoshard plan --format torchrec``
    file), and how it runs each table (``layouts``; a table not named: table- or column-wise, fused)."""

    shards: tuple[KeptShard, ...]
    world_size: int
    layouts: tuple[tuple[str, TableLayout], ...] = ()
    _by_table: dict[str, tuple[KeptShard, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        found: dict[str, list[KeptShard]] = {}
        for shard in self.shards:
            found.setdefault(shard.table, []).append(shard)
        object.__setattr__(self, "_by_table", {name: tuple(shards) for name, shards in found.items()})

    @classmethod
    def from_export(cls, data: object, source: str) -> CurrentPlacement:
        """From the JSON of an ``autoshard plan --format torchrec`` export (or a re-plan's
        ``placement``); ``InputError`` naming ``source`` and the field for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            raise InputError("tables", "must be an object of tables, each with its shards", _FIX, source)
        world = data.get("world_size")
        if not isinstance(world, int) or isinstance(world, bool) or world < 1:
            raise InputError("world_size", f"must be an integer >= 1, got {world!r}", _FIX, source)
        shards: list[KeptShard] = []
        layouts = []
        for name, entry in data["tables"].items():
            if not isinstance(entry, dict):
                raise InputError("tables", f"table {name!r} is {entry!r}, not an object with its shards", _FIX, source)
            layout = _layout(name, entry, source)
            layouts.append((name, layout))
            listed = entry.get("shards")
            if not isinstance(listed, list) or not listed:
                raise InputError("shards", f"table {name!r} lists no shards", _FIX, source)
            found = [_shard(name, s, world, layout.sharding_type, source) for s in listed]
            found = [s for s in found if s.rows != 0]  # TorchRec lists empty row blocks too
            if not found:
                raise InputError("shards", f"table {name!r} lists no shard with rows", _FIX, source)
            shards.extend(found)
        return cls(tuple(shards), world, tuple(layouts))

    def of_table(self, name: str) -> tuple[KeptShard, ...]:
        return self._by_table.get(name, ())

    def layout_of(self, name: str) -> TableLayout:
        return next((layout for table, layout in self.layouts if table == name), _DEFAULT_LAYOUT)

    def with_kernels(self, workload: Workload, tables: Sequence[str]) -> Workload:
        """``workload`` with each of ``tables`` under its current kernel and cache load factor."""
        named = set(tables)
        kernels = {n: (lay.compute_kernel, lay.cache_load_factor) for n, lay in self.layouts if n in named}
        changed = tuple(
            replace(t, compute_kernel=kernels[t.name][0], cache_load_factor=kernels[t.name][1])
            if t.name in kernels and kernels[t.name] != (t.compute_kernel, t.cache_load_factor)
            else t
            for t in workload.tables
        )
        return workload if changed == workload.tables else replace(workload, tables=changed)


Kept = dict[str, tuple[tuple[TableShard, int], ...]]
"""Per kept table, its shards (of the workload's table) with their ranks."""


def kept_tables(current: CurrentPlacement, workload: Workload, topology: Topology) -> tuple[Kept, tuple[str, ...]]:
    """The workload's tables that the current placement holds in a form a re-plan keeps on
    ``topology`` (module docstring), with their shards and ranks, and the names of those it holds
    in a form that no longer fits them (their columns changed, their constraints no longer allow
    it, a spread layout the topology no longer has: ``replaced``)."""
    held: Kept = {}
    replaced = []
    for table in workload.tables:
        shards = current.of_table(table.name)
        if not shards:
            continue
        kinds = workload.constraints.allowed_types(table.name, ALL_TYPES)
        kind = current.layout_of(table.name).sharding_type
        if kind in PLACED_TYPES:
            found = _column_blocks(table, shards, kinds, workload)
        else:
            found = _spread(table, kind, shards, topology) if kind in kinds else None
        if found is None:
            replaced.append(table.name)
        else:
            held[table.name] = found
    return held, tuple(replaced)


def _column_blocks(
    table: Table, shards: Sequence[KeptShard], kinds: frozenset[ShardingType], workload: Workload
) -> tuple[tuple[TableShard, int], ...] | None:
    """A table- or column-wise table's shards, by column, where they tile its columns on distinct
    devices in a form its constraints allow (``keeps``); else None."""
    ordered = sorted(shards, key=lambda s: s.column_offset)
    blocks = [(s.column_offset, s.columns) for s in ordered]
    if not _tiles(blocks, table.embedding_dim) or len({s.rank for s in ordered}) != len(ordered):
        return None
    if not keeps(table, [s.columns for s in ordered], workload.constraints):
        return None
    return tuple((shard_of(table, s.column_offset, s.columns, kinds), s.rank) for s in ordered)


def _spread(
    table: Table, kind: ShardingType, shards: Sequence[KeptShard], topology: Topology
) -> tuple[tuple[TableShard, int], ...] | None:
    """A spread table's shards as the planners make them (``sharding_options``), with their ranks,
    where ``shards`` are TorchRec's layout of ``kind`` on ``topology``; else None."""
    world, local = topology.num_devices, topology.local_world_size
    if kind is ShardingType.DATA_PARALLEL:
        whole = all(s.columns == table.embedding_dim and s.rows in (None, table.num_embeddings) for s in shards)
        if not whole or sorted(s.rank for s in shards) != list(range(world)):
            return None
        return tuple((replica(table, world), rank) for rank in range(world))
    ways = world if kind is ShardingType.ROW_WISE else local
    blocks: dict[tuple[int, int], list[KeptShard]] = {}
    for shard in shards:
        blocks.setdefault((shard.column_offset, shard.columns), []).append(shard)
    if ways < 2 or not _tiles(sorted(blocks), table.embedding_dim):
        return None
    if kind is not ShardingType.GRID_SHARD and list(blocks) != [(0, table.embedding_dim)]:
        return None
    found: list[tuple[TableShard, int]] = []
    for (offset, columns), block in sorted(blocks.items()):
        cut = row_shards(table, ways, kind)
        if kind is ShardingType.GRID_SHARD:  # as spread_options cuts a grid table's column blocks
            cut = tuple(replace(s, column_offset=offset, columns=columns) for s in cut)
        first = 0 if kind is ShardingType.ROW_WISE else min(s.rank for s in block) // local * local
        expected = [(first + j, s) for j, s in enumerate(cut)]  # 0-row blocks (at the end) left out
        got = sorted((s.rank, s.row_offset, s.rows) for s in block)
        if got != sorted((rank, s.row_offset, s.height) for rank, s in expected):
            return None
        found.extend((s, rank) for rank, s in expected)
    return tuple(found)


def _tiles(blocks: Sequence[tuple[int, int]], dim: int) -> bool:
    """Whether the (offset, width) blocks, sorted by offset, tile ``[0, dim)`` exactly."""
    at = 0
    for offset, width in blocks:
        if offset != at:
            return False
        at += width
    return at == dim


def _layout(name: str, entry: dict, source: str) -> TableLayout:
    """A table's sharding type, kernel and cache load factor from its export entry."""
    value = entry.get("sharding_type", ShardingType.TABLE_WISE.value)
    try:
        kind = ShardingType(value)
    except ValueError:
        raise InputError(
            "sharding_type",
            f"table {name!r} is {value!r}",
            f"use one of TorchRec's sharding types {[k.value for k in ShardingType]}",
            source,
        ) from None
    if kind is ShardingType.DATA_PARALLEL:
        return TableLayout(kind)  # TorchRec's dense kernel, whatever the export says
    kernel = entry.get("compute_kernel", FUSED)
    if kernel not in TABLE_KERNELS:
        raise InputError(
            "compute_kernel",
            f"table {name!r} runs {kernel!r}",
            f"re-planning keeps TorchRec's kernels {list(TABLE_KERNELS)}; plan the workload afresh",
            source,
        )
    cache = entry.get("cache_params")
    factor = cache.get("load_factor") if isinstance(cache, dict) and kernel == FUSED_UVM_CACHING else None
    if factor is not None and not (is_number(factor) and 0 < factor <= 1):
        raise InputError(
            "cache_params",
            f"table {name!r} has a cache load_factor {factor!r}",
            "give a load_factor in (0, 1], or leave cache_params out",
            source,
        )
    return TableLayout(kind, kernel, None if factor is None else float(factor))


def _shard(name: str, shard: object, world: int, kind: ShardingType, source: str) -> KeptShard:
    """One listed shard: its rank and columns and, for the types that cut rows, its rows (the
    other types' shards hold every row, whatever their row fields say)."""
    raw = [shard.get(k) if isinstance(shard, dict) else None for k in _INT_KEYS]
    values = [v for v in raw if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    if len(values) < len(_INT_KEYS) or values[2] < 1:
        raise InputError(
            "shards",
            f"table {name!r} has a shard {shard!r}: each needs integer rank >= 0, column_offset >= 0 and columns >= 1",
            _FIX,
            source,
        )
    if values[0] >= world:
        raise InputError(
            "rank", f"table {name!r} has a shard on rank {values[0]}, past the plan's world_size {world}", _FIX, source
        )
    if not kind.splits_rows:
        return KeptShard(name, *values)
    assert isinstance(shard, dict)
    rows = [shard.get("row_offset", 0), shard.get("rows")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in rows):
        raise InputError(
            "shards",
            f"{kind.value} table {name!r} has a shard {shard!r}: each needs integer row_offset >= 0 and rows >= 0",
            _FIX,
            source,
        )
    return KeptShard(name, *values, *rows)


__all__ = ["CurrentPlacement", "Kept", "KeptShard", "TableLayout", "kept_tables"]
