"""Conversions between AutoShard's plans and TorchRec's (configs, constraints, sharding plans, a
JSON export), for every TorchRec sharding type.

A table of one of our plans is under one sharding type (``autoshard.core.sharding``). TorchRec
describes it as a ``ParameterSharding``: the type, its ranks, a compute kernel and the shards'
metadata (offsets and sizes, rows first, and a placement). Here each type gets the layout that
TorchRec's own generators (``torchrec.distributed.sharding_plan``) give it, with W the world size
and L the local world size (devices per host):

- ``table_wise``: one shard, the whole table.
- ``column_wise``, ``table_column_wise``: one shard per column slice, in column order (slices may
  have any widths and share ranks; a table_column_wise table's ranks are on one host).
- ``row_wise``: W row blocks (``row_blocks``), block j on rank j, blocks of 0 rows included:
  TorchRec's sharder takes rank r's block as the r-th shard.
- ``table_row_wise``: L row blocks on one host h, block j on rank h x L + j, 0-row blocks included.
- ``grid_shard``: per column block (column order), its L row blocks on one host as
  ``table_row_wise``.
- ``data_parallel``: a replica on every rank, TorchRec's dense kernel (its sharders give data
  parallel no fused kernel), and no shard metadata (``sharding_spec`` None, as TorchRec's
  ``data_parallel`` generator and planner leave it); the JSON export lists one whole-table shard
  per rank.

Our plans leave 0-row blocks out (``row_shards``); they come back from TorchRec's layouts
dropped, and row blocks, replicas and column slices come back as the core's ``TableShard``s
(``row_shards``, ``replica``), so that their lookup shares are the ones the core prices.

Needs the ``torchrec`` extra (installed with ``--no-deps``, see pyproject.toml); importing this
module raises ``ImportError`` without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.sharding_plan import (
    ParameterShardingGenerator,
    construct_module_sharding_plan,
    placement,
)
from torchrec.distributed.types import CacheParams, ParameterSharding
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType, row_blocks
from autoshard.core.types import (
    DEFAULT_CACHE_LOAD_FACTOR,
    TABLE_KERNELS,
    CostModel,
    DevicePlan,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
    replica,
    row_shards,
)

FUSED = EmbeddingComputeKernel.FUSED.value
FUSED_UVM_CACHING = EmbeddingComputeKernel.FUSED_UVM_CACHING.value
FUSED_UVM = EmbeddingComputeKernel.FUSED_UVM.value
DENSE = EmbeddingComputeKernel.DENSE.value
"""TorchRec's kernel for data-parallel tables: ``EmbeddingBagCollectionSharder.compute_kernels``
offers data parallel only this one."""
assert (FUSED, FUSED_UVM_CACHING, FUSED_UVM) == TABLE_KERNELS  # the core names TorchRec's kernels
TABLE_WISE = ShardingType.TABLE_WISE.value
COLUMN_WISE = ShardingType.COLUMN_WISE.value
_COLUMN_KINDS = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)
_DATA_TYPES = {4: DataType.FP32, 2: DataType.FP16}
MODULE_PATH = ""
"""Key of the module plan in TorchRec plans we build: the EmbeddingBagCollection is the root module."""
_FIX = "place each table as its sharding type lays it out (autoshard.core.sharding), or plan it with AutoShard"


@dataclass(frozen=True, slots=True)
class ShardPlacement:
    """One shard of a table in TorchRec's terms: rows ``[row_offset, row_offset + rows)`` of
    columns ``[column_offset, column_offset + columns)`` on ``rank`` (``rows`` may be 0: a row
    block past the end of a short table)."""

    rank: int
    column_offset: int
    columns: int
    row_offset: int
    rows: int


@dataclass(frozen=True, slots=True)
class TableSharding:
    """One table as TorchRec shards it: its sharding type and its shards in TorchRec's order
    (column blocks in column order, each block's rows in row order; data parallel: one whole
    replica per rank), its kernel (``Table.compute_kernel``; data parallel: ``dense``) and the
    cache load factor of a ``fused_uvm_caching`` table (TorchRec's ``CacheParams``)."""

    sharding_type: ShardingType
    shards: tuple[ShardPlacement, ...]
    kernel: str = FUSED
    cache_load_factor: float | None = None

    @property
    def ranks(self) -> list[int]:
        """``ParameterSharding.ranks``: each shard's rank, in order."""
        return [p.rank for p in self.shards]

    @property
    def compute_kernel(self) -> str:
        return DENSE if self.sharding_type is ShardingType.DATA_PARALLEL else self.kernel

    @property
    def cache_params(self) -> CacheParams | None:
        """TorchRec's ``CacheParams`` of a ``fused_uvm_caching`` table (its load factor), else None."""
        if self.compute_kernel != FUSED_UVM_CACHING:
            return None
        return CacheParams(
            load_factor=DEFAULT_CACHE_LOAD_FACTOR if self.cache_load_factor is None else self.cache_load_factor
        )


def to_embedding_bag_configs(workload: Workload) -> list[EmbeddingBagConfig]:
    """One EmbeddingBagConfig per table, with one feature named after the table."""
    return [
        EmbeddingBagConfig(
            name=t.name,
            num_embeddings=t.num_embeddings,
            embedding_dim=t.embedding_dim,
            feature_names=[t.name],
            data_type=_data_type(t, i),
        )
        for i, t in enumerate(workload.tables)
    ]


class _NoInitOnMeta(torch.overrides.TorchFunctionMode):
    """Skips ``nn.init.normal_`` on meta tensors: they hold no values, and initialising them took
    0.57 s of a 1,000-table collection's 0.7 s. A function mode is this thread's alone."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.nn.init.normal_:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def embedding_bag_collection(workload: Workload, device: str | torch.device = "meta") -> EmbeddingBagCollection:
    """The workload as an EmbeddingBagCollection (on ``meta`` by default: no memory allocated)."""
    device = torch.device(device)
    if device.type != "meta":
        return EmbeddingBagCollection(tables=to_embedding_bag_configs(workload), device=device)
    with _NoInitOnMeta():
        return EmbeddingBagCollection(tables=to_embedding_bag_configs(workload), device=device)


def embedding_collection(workload: Workload, device: str | torch.device = "meta") -> EmbeddingCollection:
    """The workload as an EmbeddingCollection (sequence tables: one feature named after each
    table, on ``meta`` by default)."""
    configs = [
        EmbeddingConfig(
            name=c.name,
            num_embeddings=c.num_embeddings,
            embedding_dim=c.embedding_dim,
            feature_names=c.feature_names,
            data_type=c.data_type,
        )
        for c in to_embedding_bag_configs(workload)
    ]
    return EmbeddingCollection(tables=configs, device=torch.device(device))


def _module_and_sharder(workload: Workload) -> tuple[torch.nn.Module, Any]:
    """The collection a plan of ``workload`` shards, with TorchRec's sharder of it: an
    EmbeddingCollection for sequence tables (``Table.pooled`` False), else an
    EmbeddingBagCollection; ``InputError`` when the workload mixes both."""
    pooled = {t.pooled for t in workload.tables}
    if len(pooled) > 1:
        raise InputError(
            "pooled",
            "the workload mixes pooled and sequence tables; one TorchRec module holds one kind",
            "convert the tables of each collection on their own",
        )
    if pooled == {False}:
        return embedding_collection(workload), EmbeddingCollectionSharder()
    return embedding_bag_collection(workload), EmbeddingBagCollectionSharder()


def table_shardings(
    plan: ShardingPlan,
    workload: Workload | None = None,
    world_size: int | None = None,
    local_world_size: int | None = None,
) -> dict[str, TableSharding]:
    """Each table of the plan as TorchRec shards it (see the module docstring), checked to be
    the layout its sharding type has in TorchRec.

    ``world_size`` defaults to the plan's devices, ``local_world_size`` to ``world_size`` (one
    host). With ``workload``, also checks that the plan places exactly the workload's tables and
    returns them in its order, sized as the workload's tables (a run may build them with fewer
    rows: row blocks are cut from its rows).
    """
    world = len(plan.devices) if world_size is None else world_size
    local = _local_size(world, local_world_size)
    found: dict[str, list[tuple[int, TableShard]]] = {}
    tables: dict[str, Table] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            tables.setdefault(shard.table.name, shard.table)
            found.setdefault(shard.table.name, []).append((rank, shard))
    if workload is not None:
        _check_same_tables(set(tables), workload, "the plan")
        built = {t.name: t for t in workload.tables}
        return {name: _sharding_of(tables[name], built[name], found[name], world, local) for name in built}
    return {name: _sharding_of(table, table, found[name], world, local) for name, table in tables.items()}


def table_placements(
    plan: ShardingPlan,
    workload: Workload | None = None,
    world_size: int | None = None,
    local_world_size: int | None = None,
) -> dict[str, tuple[ShardPlacement, ...]]:
    """Each table's shards in TorchRec's order (``table_shardings``, without the types)."""
    return {name: s.shards for name, s in table_shardings(plan, workload, world_size, local_world_size).items()}


def export_torchrec(
    plan: ShardingPlan, workload: Workload, local_world_size: int | None = None
) -> dict[str, dict[str, Any]]:
    """A JSON-serializable export: per table, its sharding type (TorchRec's value), ranks, kernel,
    pooling factor and shards ``{"rank", "row_offset", "rows", "column_offset", "columns"}`` in
    TorchRec's order (data parallel: one whole-table shard per rank). ``local_world_size``: the
    devices per host (default: every device on one host). ``plan_from_export`` reads it back
    (also older exports, whose shards have only the column fields);
    ``parameter_constraints_from_export`` turns it into TorchRec ParameterConstraints."""
    pooling = {t.name: t.pooling_factor for t in workload.tables}
    return {
        name: _export_entry(sharding, pooling[name])
        for name, sharding in table_shardings(plan, workload, None, local_world_size).items()
    }


def export_document(workload: Workload, topology: Topology, plan: ShardingPlan) -> dict[str, Any]:
    """The file ``autoshard plan --format torchrec`` and ``replan --out`` write: the planner, the
    world size (and devices per host, on a cluster), the workload, the plan's max and each
    table's ``export_torchrec`` entry; ``plan_from_export`` reads its ``tables`` back."""
    return {
        "planner": plan.planner,
        "world_size": topology.num_devices,
        **({"local_world_size": topology.local_world_size} if topology.num_hosts > 1 else {}),
        "workload": workload.name,
        "max_cost_ms": plan.max_cost_ms,
        "tables": export_torchrec(plan, workload, topology.local_world_size),
    }


def plan_from_export(
    export: Mapping[str, Mapping[str, Any]],
    workload: Workload,
    world_size: int,
    planner: str = "export",
    local_world_size: int | None = None,
) -> ShardingPlan:
    """Our plan back from an ``export_torchrec`` dict (device costs 0): with ``to_torchrec_plan``
    it gives the ``ShardingPlan`` that ``DistributedModelParallel`` applies. Shards without row
    fields (exports before row sharding) hold all rows. ``local_world_size``: the export's
    devices per host (the CLI writes it as ``local_world_size`` on clusters); without it,
    table_row_wise and grid tables take it from their number of row blocks."""
    tables = {t.name: t for t in workload.tables}
    _check_same_tables(set(export), workload, "the export")
    devices: list[list[TableShard]] = [[] for _ in range(world_size)]
    for name, entry in export.items():
        kind = _sharding_type(entry.get("sharding_type", COLUMN_WISE), name)
        factor = (entry.get("cache_params") or {}).get("load_factor")
        table = _with_kernel(tables[name], kind, entry.get("compute_kernel", FUSED), factor)
        placements = [
            ShardPlacement(
                shard["rank"],
                shard["column_offset"],
                shard["columns"],
                shard.get("row_offset", 0),
                shard.get("rows", table.num_embeddings),
            )
            for shard in entry["shards"]
        ]
        for rank, shard in _table_shards(table, kind, placements, world_size, local_world_size):
            devices[rank].append(shard)
    return ShardingPlan(planner, tuple(DevicePlan(tuple(d), 0.0) for d in devices))


def parameter_constraints_from_export(export: Mapping[str, Mapping[str, Any]]) -> dict[str, ParameterConstraints]:
    """ParameterConstraints from an ``export_torchrec`` dict.

    TorchRec's constraints (1.8) cannot pin ranks: they restrict the sharding type and kernel,
    set the pooling factor and, for tables cut into column blocks (column_wise,
    table_column_wise, grid_shard), ``min_partition`` = the narrowest block. TorchRec's planner
    only cuts equal-width blocks whose width divides the dimension and is a multiple of 4, so
    other widths cannot be reproduced by it; use ``to_torchrec_plan`` for those.
    """
    result: dict[str, ParameterConstraints] = {}
    for name, entry in export.items():
        kind = _sharding_type(entry["sharding_type"], name)
        cut = kind in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE, ShardingType.GRID_SHARD)
        factor = (entry.get("cache_params") or {}).get("load_factor")
        result[name] = ParameterConstraints(
            sharding_types=[kind.value],
            compute_kernels=[entry["compute_kernel"]],
            min_partition=min(s["columns"] for s in entry["shards"]) if cut else None,
            pooling_factors=[float(entry["pooling_factor"])],
            cache_params=None if factor is None else CacheParams(load_factor=float(factor)),
        )
    return result


def to_parameter_constraints(
    plan: ShardingPlan, local_world_size: int | None = None
) -> dict[str, ParameterConstraints]:
    """Per table its sharding type, kernel and pooling factor (see
    ``parameter_constraints_from_export`` for the limits)."""
    pooling = {s.table.name: s.table.pooling_factor for d in plan.devices for s in d.shards}
    shardings = table_shardings(plan, None, None, local_world_size)
    return parameter_constraints_from_export({n: _export_entry(s, pooling[n]) for n, s in shardings.items()})


def to_torchrec_plan(
    plan: ShardingPlan,
    workload: Workload,
    world_size: int,
    compute_device: str = "cuda",
    local_world_size: int | None = None,
) -> TorchRecShardingPlan:
    """Our plan as a TorchRec ShardingPlan for ``DistributedModelParallel`` over the workload's
    EmbeddingBagCollection (an EmbeddingCollection for sequence tables; module path ``""``):
    each table's sharding type, ranks and shard metadata as TorchRec's generators lay them out,
    fused kernels (data parallel: dense), placements ``rank:{r}/{device}``
    (``local_world_size``: devices per host, default ``world_size``: one host).

    Column slices may have any widths and share ranks (TorchRec's ``column_wise(ranks=...)``
    helper only cuts equal widths that are multiples of 4, so shards are built here directly).
    """
    local = _local_size(world_size, local_world_size)
    shardings = table_shardings(plan, workload, world_size, local)
    module, sharder = _module_and_sharder(workload)
    module_plan = construct_module_sharding_plan(
        module,
        {name: _generator(sharding) for name, sharding in shardings.items()},
        sharder=sharder,
        local_size=local,
        world_size=world_size,
        device_type=compute_device,
    )
    return TorchRecShardingPlan({MODULE_PATH: module_plan})


def from_torchrec_plan(
    torchrec_plan: TorchRecShardingPlan,
    workload: Workload,
    world_size: int,
    cost_model: CostModel | None = None,
    planner: str = "torchrec",
    plan_time_s: float = 0.0,
    local_world_size: int | None = None,
) -> ShardingPlan:
    """A TorchRec plan of any sharding type as our plan: column slices (adjacent ones on one rank
    merged), row blocks, grid blocks (adjacent column blocks on one host merged) and replicas as
    the core's ``TableShard``s; device costs from ``cost_model.predict_many`` when given, else 0.
    ``local_world_size``: devices per host; without it, table_row_wise and grid tables take it
    from their number of row blocks (TorchRec lists L of them, 0-row ones included)."""
    tables = {t.name: t for t in workload.tables}
    shardings: dict[str, ParameterSharding] = {
        name: sharding
        for module_plan in torchrec_plan.plan.values()
        for name, sharding in module_plan.items()  # type: ignore[attr-defined]
    }
    _check_same_tables(set(shardings), workload, "the TorchRec plan")
    devices: list[list[TableShard]] = [[] for _ in range(world_size)]
    for name, own in tables.items():
        sharding = shardings[name]
        kind = _sharding_type(sharding.sharding_type, name)
        factor = sharding.cache_params.load_factor if sharding.cache_params is not None else None
        table = _with_kernel(own, kind, sharding.compute_kernel, factor)
        for rank, shard in _table_shards(
            table, kind, _placements_of(table, kind, sharding), world_size, local_world_size
        ):
            devices[rank].append(shard)
    costs = _device_costs(devices, workload.batch_size, cost_model)
    return ShardingPlan(planner, tuple(DevicePlan(tuple(d), c) for d, c in zip(devices, costs)), plan_time_s)


# --- our plan -> TorchRec's layout -------------------------------------------------------------


def _sharding_of(
    table: Table, built: Table, parts: Sequence[tuple[int, TableShard]], world: int, local: int
) -> TableSharding:
    """``_layout_of`` with the table's kernel and cache load factor."""
    layout = _layout_of(table, built, parts, world, local)
    return replace(layout, kernel=table.compute_kernel, cache_load_factor=table.cache_load_factor)


def _layout_of(
    table: Table, built: Table, parts: Sequence[tuple[int, TableShard]], world: int, local: int
) -> TableSharding:
    """The layout of one table's shards ``(rank, shard)``, checked against ``table`` (the plan's),
    sized as ``built`` (the workload's: the same table, its rows possibly capped)."""
    for rank, _ in parts:
        if not 0 <= rank < world:
            raise InputError(
                "world_size", f"table {table.name!r} is on device {rank}", f"use a world size above {rank}"
            )
    kinds = {s.sharding_type for _, s in parts}
    if kinds <= {ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE}:
        whole_alone = len(parts) == 1 and kinds == {ShardingType.TABLE_WISE}
        kind = ShardingType.TABLE_WISE if whole_alone else ShardingType.COLUMN_WISE
    elif len(kinds) == 1:
        (kind,) = kinds
    else:
        raise InputError(
            "sharding",
            f"table {table.name!r} mixes sharding types {sorted(k.value for k in kinds)}",
            "give each table one sharding type",
        )
    rows, dim = built.num_embeddings, built.embedding_dim
    if kind is ShardingType.DATA_PARALLEL:
        ranks = sorted(rank for rank, _ in parts)
        if ranks != list(range(world)) or any(_is_cut(s) for _, s in parts):
            raise _layout_error(table, kind, f"needs one whole replica on each of the {world} ranks, has {ranks}")
        return TableSharding(kind, tuple(ShardPlacement(r, 0, dim, 0, rows) for r in range(world)))
    if kind in _COLUMN_KINDS:
        if any((s.row_offset, s.height) != (0, table.num_embeddings) for _, s in parts):
            raise _layout_error(table, kind, "has a shard of some rows only; row blocks need a row sharding type")
        ordered = sorted(parts, key=lambda part: part[1].column_offset)
        _check_columns(table, [(s.column_offset, s.width) for _, s in ordered])
        if kind is ShardingType.TABLE_COLUMN_WISE:
            _check_one_host(table, kind, [rank for rank, _ in ordered], local)
        return TableSharding(kind, tuple(ShardPlacement(r, s.column_offset, s.width, 0, rows) for r, s in ordered))
    ways = world if kind is ShardingType.ROW_WISE else local
    blocks: dict[tuple[int, int], list[tuple[int, TableShard]]] = {}
    for rank, shard in parts:
        blocks.setdefault((shard.column_offset, shard.width), []).append((rank, shard))
    if kind is not ShardingType.GRID_SHARD and list(blocks) != [(0, table.embedding_dim)]:
        raise _layout_error(table, kind, "has a shard of some columns only; column blocks need grid_shard")
    _check_columns(table, sorted(blocks))
    shards: list[ShardPlacement] = []
    for (offset, width), block in sorted(blocks.items()):
        first = _first_rank(table, kind, block, ways, local)
        shards.extend(
            ShardPlacement(first + j, offset, width, row_offset, size)
            for j, (row_offset, size) in enumerate(row_blocks(rows, ways))
        )
    return TableSharding(kind, tuple(shards))


def _first_rank(
    table: Table, kind: ShardingType, block: Sequence[tuple[int, TableShard]], ways: int, local: int
) -> int:
    """The rank of row block 0 of one column block's row blocks ``(rank, shard)``: 0 for
    row_wise, else the first rank of their host; checked to be TorchRec's row blocks, block j on
    that rank + j."""
    ranks = [rank for rank, _ in block]
    first = 0 if kind is ShardingType.ROW_WISE else min(ranks) // local * local
    expected = [(first + j, (offset, size)) for j, (offset, size) in enumerate(row_blocks(table.num_embeddings, ways))]
    got = sorted((rank, (s.row_offset, s.height)) for rank, s in block)
    if got != [(rank, span) for rank, span in expected if span[1] > 0]:
        where = "ranks 0.." if kind is ShardingType.ROW_WISE else f"host {first // local}'s ranks {first}.."
        raise _layout_error(
            table,
            kind,
            f"has row blocks (rank, (row_offset, rows)) {got}; TorchRec cuts {ways} blocks of "
            f"ceil(rows / {ways}) rows, block j on {where} + j: {expected}",
        )
    return first


def _export_entry(sharding: TableSharding, pooling_factor: float) -> dict[str, Any]:
    cache = sharding.cache_params
    return {
        "sharding_type": sharding.sharding_type.value,
        "ranks": sharding.ranks,
        "compute_kernel": sharding.compute_kernel,
        **({"cache_params": {"load_factor": cache.load_factor}} if cache is not None else {}),
        "pooling_factor": pooling_factor,
        "shards": [
            {
                "rank": p.rank,
                "row_offset": p.row_offset,
                "rows": p.rows,
                "column_offset": p.column_offset,
                "columns": p.columns,
            }
            for p in sharding.shards
        ],
    }


def _generator(sharding: TableSharding) -> ParameterShardingGenerator:
    """A construct_module_sharding_plan generator giving this table's ParameterSharding."""

    def generate(
        param: torch.nn.Parameter, local_size: int, world_size: int, device_type: str, sharder: Any
    ) -> ParameterSharding:
        spec = None
        if sharding.sharding_type is not ShardingType.DATA_PARALLEL:
            spec = EnumerableShardingSpec(
                [
                    ShardMetadata(
                        shard_offsets=[p.row_offset, p.column_offset],
                        shard_sizes=[p.rows, p.columns],
                        placement=placement(device_type, p.rank, local_size),
                    )
                    for p in sharding.shards
                ]
            )
        return ParameterSharding(
            sharding_type=sharding.sharding_type.value,
            compute_kernel=sharding.compute_kernel,
            ranks=sharding.ranks,
            sharding_spec=spec,
            cache_params=sharding.cache_params,
        )

    return generate


# --- TorchRec's layout -> our plan -------------------------------------------------------------


def _with_kernel(table: Table, kind: ShardingType, kernel: str, load_factor: float | None) -> Table:
    """``table`` running ``kernel`` (with ``load_factor``, a ``fused_uvm_caching`` table's), as a
    plan, an export or a TorchRec plan gives it: data parallel's ``dense`` leaves it as it is;
    ``InputError`` for a kernel AutoShard does not plan."""
    if kind is ShardingType.DATA_PARALLEL:
        return table
    if kernel not in TABLE_KERNELS:
        raise InputError(
            "compute_kernel",
            f"table {table.name!r} runs {kernel!r}; AutoShard plans {list(TABLE_KERNELS)} (dense for data parallel)",
            "use one of those kernels",
        )
    factor = load_factor if kernel == FUSED_UVM_CACHING else None
    if (kernel, factor) == (table.compute_kernel, table.cache_load_factor):
        return table
    return replace(table, compute_kernel=kernel, cache_load_factor=factor)


def _placements_of(table: Table, kind: ShardingType, sharding: ParameterSharding) -> list[ShardPlacement]:
    if sharding.sharding_spec is None:
        if kind is not ShardingType.DATA_PARALLEL or not sharding.ranks:
            raise _layout_error(table, kind, "has no shard metadata")
        return [ShardPlacement(r, 0, table.embedding_dim, 0, table.num_embeddings) for r in sharding.ranks]
    return [
        ShardPlacement(m.placement.rank(), m.shard_offsets[1], m.shard_sizes[1], m.shard_offsets[0], m.shard_sizes[0])
        for m in sharding.sharding_spec.shards  # type: ignore[attr-defined]
    ]


def _table_shards(
    table: Table, kind: ShardingType, placements: Sequence[ShardPlacement], world: int, local: int | None
) -> list[tuple[int, TableShard]]:
    """One table's shards ``(rank, TableShard)`` from TorchRec's layout of it, checked."""
    for p in placements:
        if not 0 <= p.rank < world:
            raise InputError(
                "rank", f"table {table.name!r} has a shard on rank {p.rank}", f"use a world size above {p.rank}"
            )
    rows = table.num_embeddings
    if kind is ShardingType.DATA_PARALLEL:
        ranks = sorted(p.rank for p in placements)
        if ranks != list(range(world)) or any(
            (p.row_offset, p.rows, p.columns) != (0, rows, table.embedding_dim) for p in placements
        ):
            raise _layout_error(table, kind, f"needs one whole replica on each of the {world} ranks, has {ranks}")
        return [(r, replica(table, world)) for r in ranks]
    if kind in _COLUMN_KINDS:
        if any((p.row_offset, p.rows) != (0, rows) for p in placements):
            raise _layout_error(table, kind, "is split by rows")
        ordered = sorted(placements, key=lambda p: p.column_offset)
        _check_columns(table, [(p.column_offset, p.columns) for p in ordered])
        if kind is ShardingType.TABLE_COLUMN_WISE and local is not None:
            _check_one_host(table, kind, [p.rank for p in ordered], local)
        sharding = ShardingType.TABLE_COLUMN_WISE if kind is ShardingType.TABLE_COLUMN_WISE else None
        return [
            (
                p.rank,
                TableShard(table)
                if p.columns == table.embedding_dim
                else TableShard(table, p.column_offset, p.columns, sharding=sharding),
            )
            for p in _merge_neighbours(ordered, lambda p: p.rank)
        ]
    blocks: dict[tuple[int, int], list[ShardPlacement]] = {}
    for p in placements:
        blocks.setdefault((p.column_offset, p.columns), []).append(p)
    if kind is not ShardingType.GRID_SHARD and list(blocks) != [(0, table.embedding_dim)]:
        raise _layout_error(table, kind, "is split by columns")
    _check_columns(table, sorted(blocks))
    ways = world if kind is ShardingType.ROW_WISE else _ways(table, kind, blocks, world, local)
    hosted = [  # each column block at the rank of its row block 0
        ShardPlacement(_first_rank_of(table, kind, block, ways), offset, width, 0, rows)
        for (offset, width), block in sorted(blocks.items())
    ]
    if kind is ShardingType.GRID_SHARD:
        hosted = _merge_neighbours(hosted, lambda p: p.rank)
    index = {span: j for j, span in enumerate(row_blocks(rows, ways)) if span[1] > 0}
    out: list[tuple[int, TableShard]] = []
    for column_block in hosted:
        columns = None if column_block.columns == table.embedding_dim else column_block.columns
        for shard in row_shards(table, ways, kind, column_block.column_offset, columns):
            out.append((column_block.rank + index[shard.row_offset, shard.height], shard))
    return out


def _ways(
    table: Table,
    kind: ShardingType,
    blocks: Mapping[tuple[int, int], Sequence[ShardPlacement]],
    world: int,
    local: int | None,
) -> int:
    """The row blocks of each column block of a table_row_wise or grid table: the local world
    size when given, else the number TorchRec listed (L, 0-row blocks included)."""
    counts = {len(block) for block in blocks.values()}
    ways = local if local is not None else max(counts)
    if ways < 1 or world % ways or (local is None and len(counts) > 1):
        raise _layout_error(
            table,
            kind,
            f"lists {sorted(counts)} row blocks per column block; with {world} ranks TorchRec lists one per "
            "device of a host (pass the local world size)",
        )
    return ways


def _first_rank_of(table: Table, kind: ShardingType, block: Sequence[ShardPlacement], ways: int) -> int:
    """The rank of row block 0 of one column block's row blocks, checked to be TorchRec's layout
    (block j on that rank + j; 0-row blocks may be left out)."""
    first = 0 if kind is ShardingType.ROW_WISE else min(p.rank for p in block) // ways * ways
    expected = [(first + j, span) for j, span in enumerate(row_blocks(table.num_embeddings, ways)) if span[1] > 0]
    got = sorted((p.rank, (p.row_offset, p.rows)) for p in block if p.rows > 0)
    if got != expected or any(not first <= p.rank < first + ways for p in block):
        raise _layout_error(
            table,
            kind,
            f"has row blocks (rank, (row_offset, rows)) {sorted((p.rank, (p.row_offset, p.rows)) for p in block)}; "
            f"TorchRec's {ways} row blocks are {expected} (0-row blocks aside)",
        )
    return first


def _merge_neighbours(shards: Sequence[ShardPlacement], where: Callable[[ShardPlacement], int]) -> list[ShardPlacement]:
    """Adjacent column slices (in column order) at the same ``where(shard)`` (a rank, or a column
    block's first rank) as one slice: TorchRec's partitioner may put several column blocks of a
    table on one rank (or one host); our plans hold one slice per table per device where the
    columns allow."""
    merged: list[ShardPlacement] = []
    for p in shards:
        last = merged[-1] if merged else None
        if last is not None and where(last) == where(p) and last.column_offset + last.columns == p.column_offset:
            merged[-1] = ShardPlacement(last.rank, last.column_offset, last.columns + p.columns, p.row_offset, p.rows)
        else:
            merged.append(p)
    return merged


# --- shared ------------------------------------------------------------------------------------


def _device_costs(
    devices: Sequence[Sequence[TableShard]], batch_size: int, cost_model: CostModel | None
) -> list[float]:
    costs = [0.0] * len(devices)
    if cost_model is None:
        return costs
    busy = [i for i, d in enumerate(devices) if d]
    predicted = cost_model.predict_many([[s.as_table for s in devices[i]] for i in busy], batch_size)
    for i, cost in zip(busy, predicted):
        costs[i] = float(cost)
    return costs


def _is_cut(shard: TableShard) -> bool:
    return shard.width != shard.table.embedding_dim or shard.height != shard.table.num_embeddings


def _local_size(world_size: int, local_world_size: int | None) -> int:
    local = world_size if local_world_size is None else local_world_size
    if not 1 <= local <= world_size or world_size % local:
        raise InputError(
            "local_world_size",
            f"{local} devices per host do not divide the {world_size} devices",
            "give the devices per host (TorchRec's LOCAL_WORLD_SIZE)",
        )
    return local


def _check_one_host(table: Table, kind: ShardingType, ranks: Sequence[int], local: int) -> None:
    hosts = sorted({rank // local for rank in ranks})
    if len(hosts) > 1:
        raise _layout_error(
            table, kind, f"has shards on ranks {sorted(set(ranks))} of hosts {hosts}; it stays on one host"
        )


def _sharding_type(value: object, name: str) -> ShardingType:
    try:
        return ShardingType(value)
    except ValueError:
        raise InputError(
            "sharding_type",
            f"table {name!r} is {value!r}",
            f"use one of TorchRec's sharding types {[k.value for k in ShardingType]}",
        ) from None


def _layout_error(table: Table, kind: ShardingType, detail: str) -> InputError:
    return InputError("sharding", f"{kind.value} table {table.name!r} {detail}", _FIX)


def _check_columns(table: Table, slices: Sequence[tuple[int, int]]) -> None:
    """The (offset, width) slices, sorted by offset, must tile [0, embedding_dim) exactly."""
    expected = 0
    for offset, width in slices:
        if offset != expected or width < 1:
            break
        expected += width
    else:
        if expected == table.embedding_dim:
            return
    raise InputError(
        "columns",
        f"table {table.name!r}: shards {list(slices)} (offset, width) do not "
        f"cover its {table.embedding_dim} columns exactly once",
        "place every column of every table on exactly one device",
    )


def _check_same_tables(names: set[str], workload: Workload, what: str) -> None:
    expected = {t.name for t in workload.tables}
    if names != expected:
        missing, extra = sorted(expected - names), sorted(names - expected)
        raise InputError(
            "tables",
            f"{what} does not match the workload: missing {missing}, unknown {extra}",
            "convert a plan made for this workload",
        )


def _data_type(table: Table, index: int) -> DataType:
    try:
        return _DATA_TYPES[table.bytes_per_element]
    except KeyError:
        raise InputError(
            "bytes_per_element",
            f"TorchRec trains fp32 (4) or fp16 (2) tables, not {table.bytes_per_element}",
            "use 4 or 2 bytes per element",
            where=f"tables[{index}] {table.name!r}",
        ) from None


__all__ = [
    "COLUMN_WISE",
    "DENSE",
    "FUSED",
    "MODULE_PATH",
    "ShardPlacement",
    "TABLE_WISE",
    "TableSharding",
    "embedding_bag_collection",
    "embedding_collection",
    "export_torchrec",
    "from_torchrec_plan",
    "parameter_constraints_from_export",
    "plan_from_export",
    "table_placements",
    "table_shardings",
    "to_embedding_bag_configs",
    "to_parameter_constraints",
    "to_torchrec_plan",
]
