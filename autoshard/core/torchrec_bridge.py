"""Conversions between AutoShard's plans and TorchRec's (configs, constraints, sharding plans, a
JSON export).

Our plans hold whole tables (TorchRec ``table_wise``) and column slices (``column_wise``; TorchRec's
``table_column_wise`` converts back the same way). Row-wise and data-parallel shardings have no
counterpart in our types and are refused with an ``InputError``.

Needs the ``torchrec`` extra (installed with ``--no-deps``, see pyproject.toml); importing this
module raises ``ImportError`` without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.sharding_plan import (
    ParameterShardingGenerator,
    construct_module_sharding_plan,
    placement,
)
from torchrec.distributed.types import ParameterSharding, ShardingType
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from autoshard.core.errors import InputError
from autoshard.core.types import (
    CostModel,
    DevicePlan,
    ShardingPlan,
    Table,
    TableShard,
    Workload,
)

FUSED = EmbeddingComputeKernel.FUSED.value
TABLE_WISE = ShardingType.TABLE_WISE.value
COLUMN_WISE = ShardingType.COLUMN_WISE.value
_COLUMN_TYPES = {TABLE_WISE, COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE.value}
_DATA_TYPES = {4: DataType.FP32, 2: DataType.FP16}
MODULE_PATH = ""
"""Key of the module plan in TorchRec plans we build: the EmbeddingBagCollection is the root module."""


@dataclass(frozen=True, slots=True)
class ShardPlacement:
    """Where one column slice ``[column_offset, column_offset + columns)`` of a table lives."""

    rank: int
    column_offset: int
    columns: int


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


def embedding_bag_collection(workload: Workload, device: str | torch.device = "meta") -> EmbeddingBagCollection:
    """The workload as an EmbeddingBagCollection (on ``meta`` by default: no memory allocated)."""
    return EmbeddingBagCollection(tables=to_embedding_bag_configs(workload), device=torch.device(device))


def table_placements(plan: ShardingPlan, workload: Workload | None = None) -> dict[str, tuple[ShardPlacement, ...]]:
    """Each table's shards in column order, checked to tile its columns exactly once.

    With ``workload``, also checks that the plan places exactly the workload's tables and returns
    them in the workload's order.
    """
    found: dict[str, list[ShardPlacement]] = {}
    tables: dict[str, Table] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            tables[shard.table.name] = shard.table
            found.setdefault(shard.table.name, []).append(ShardPlacement(rank, shard.column_offset, shard.width))
    if workload is not None:
        _check_same_tables(set(tables), workload, "the plan")
        tables = {t.name: t for t in workload.tables}
    return _in_column_order(found, tables)


def export_torchrec(plan: ShardingPlan, workload: Workload) -> dict[str, dict[str, Any]]:
    """A JSON-serializable export: per table, its sharding type, ranks, kernel, pooling factor and
    shards ``{"rank", "column_offset", "columns"}``. ``parameter_constraints_from_export`` turns it
    into TorchRec ParameterConstraints; ``to_torchrec_plan`` gives the exact placement."""
    pooling = {t.name: t.pooling_factor for t in workload.tables}
    return {name: _export_entry(shards, pooling[name]) for name, shards in table_placements(plan, workload).items()}


def plan_from_export(
    export: dict[str, dict[str, Any]], workload: Workload, world_size: int, planner: str = "export"
) -> ShardingPlan:
    """Our plan back from an ``export_torchrec`` dict (device costs 0): with ``to_torchrec_plan``
    it gives the ``ShardingPlan`` that ``DistributedModelParallel`` applies."""
    tables = {t.name: t for t in workload.tables}
    _check_same_tables(set(export), workload, "the export")
    devices: list[list[TableShard]] = [[] for _ in range(world_size)]
    for name, entry in export.items():
        for shard in entry["shards"]:
            if not 0 <= shard["rank"] < world_size:
                raise InputError(
                    "rank",
                    f"table {name!r} has a shard on rank {shard['rank']}",
                    f"use a world size above {shard['rank']}",
                )
            devices[shard["rank"]].append(TableShard(tables[name], shard["column_offset"], shard["columns"]))
    plan = ShardingPlan(planner, tuple(DevicePlan(tuple(d), 0.0) for d in devices))
    table_placements(plan, workload)  # columns tiled exactly once
    return plan


def parameter_constraints_from_export(export: dict[str, dict[str, Any]]) -> dict[str, ParameterConstraints]:
    """ParameterConstraints from an ``export_torchrec`` dict.

    TorchRec's constraints (1.8) cannot pin ranks: they restrict the sharding type and kernel,
    set the pooling factor and, for column-wise tables, ``min_partition`` = the narrowest shard.
    TorchRec's planner only cuts equal-width shards whose width divides the dimension and is a
    multiple of 4, so other widths cannot be reproduced by it; use ``to_torchrec_plan`` for those.
    """
    result: dict[str, ParameterConstraints] = {}
    for name, entry in export.items():
        sharding_type = entry["sharding_type"]
        min_partition = min(s["columns"] for s in entry["shards"]) if sharding_type == COLUMN_WISE else None
        result[name] = ParameterConstraints(
            sharding_types=[sharding_type],
            compute_kernels=[entry["compute_kernel"]],
            min_partition=min_partition,
            pooling_factors=[float(entry["pooling_factor"])],
        )
    return result


def to_parameter_constraints(plan: ShardingPlan) -> dict[str, ParameterConstraints]:
    """Per table: ``table_wise`` for whole tables, ``column_wise`` for split ones, the fused
    kernel and its pooling factor (see ``parameter_constraints_from_export`` for the limits)."""
    pooling = {s.table.name: s.table.pooling_factor for d in plan.devices for s in d.shards}
    return parameter_constraints_from_export(
        {name: _export_entry(shards, pooling[name]) for name, shards in table_placements(plan).items()}
    )


def to_torchrec_plan(
    plan: ShardingPlan,
    workload: Workload,
    world_size: int,
    compute_device: str = "cuda",
    local_world_size: int | None = None,
) -> TorchRecShardingPlan:
    """Our plan as a TorchRec ShardingPlan for ``DistributedModelParallel`` over the workload's
    EmbeddingBagCollection (module path ``""``), fused kernels, placements ``rank:{r}/{device}``
    (``local_world_size``: devices per host, default ``world_size``: one host).

    Column shards may have any widths and share ranks (TorchRec's ``column_wise(ranks=...)``
    helper only cuts equal widths that are multiples of 4, so shards are built here directly).
    """
    placements = table_placements(plan, workload)
    _check_ranks(placements, world_size)
    module = embedding_bag_collection(workload)
    module_plan = construct_module_sharding_plan(
        module,
        {name: _generator(shards) for name, shards in placements.items()},
        sharder=EmbeddingBagCollectionSharder(),
        local_size=world_size if local_world_size is None else local_world_size,
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
) -> ShardingPlan:
    """TorchRec's table-wise, column-wise and table-column-wise shardings as our plan (adjacent
    column shards on one rank merged); device costs from ``cost_model.predict_many`` when given,
    else 0."""
    tables = {t.name: t for t in workload.tables}
    shardings: dict[str, ParameterSharding] = {
        name: sharding for module_plan in torchrec_plan.plan.values() for name, sharding in module_plan.items()
    }  # type: ignore[attr-defined]
    _check_same_tables(set(shardings), workload, "the TorchRec plan")
    found = {name: _placements_of(tables[name], s) for name, s in shardings.items()}
    placements = _in_column_order(found, tables)
    _check_ranks(placements, world_size)
    devices: list[list[TableShard]] = [[] for _ in range(world_size)]
    for name, shards in placements.items():
        table = tables[name]
        for p in _merge_neighbours(shards):
            whole = p.columns == table.embedding_dim
            devices[p.rank].append(TableShard(table) if whole else TableShard(table, p.column_offset, p.columns))
    costs = _device_costs(devices, workload.batch_size, cost_model)
    return ShardingPlan(planner, tuple(DevicePlan(tuple(d), c) for d, c in zip(devices, costs)), plan_time_s)


def _merge_neighbours(shards: Sequence[ShardPlacement]) -> list[ShardPlacement]:
    """Adjacent column slices on the same rank as one slice (TorchRec's partitioner may put
    several column shards of a table on one rank; our plans hold one slice per table per device
    where the columns allow)."""
    merged: list[ShardPlacement] = []
    for p in shards:
        last = merged[-1] if merged else None
        if last is not None and last.rank == p.rank and last.column_offset + last.columns == p.column_offset:
            merged[-1] = ShardPlacement(p.rank, last.column_offset, last.columns + p.columns)
        else:
            merged.append(p)
    return merged


def _export_entry(shards: Sequence[ShardPlacement], pooling_factor: float) -> dict[str, Any]:
    return {
        "sharding_type": TABLE_WISE if len(shards) == 1 else COLUMN_WISE,
        "ranks": [p.rank for p in shards],
        "compute_kernel": FUSED,
        "pooling_factor": pooling_factor,
        "shards": [{"rank": p.rank, "column_offset": p.column_offset, "columns": p.columns} for p in shards],
    }


def _generator(shards: Sequence[ShardPlacement]) -> ParameterShardingGenerator:
    """A construct_module_sharding_plan generator placing these column slices on their ranks."""
    sharding_type = TABLE_WISE if len(shards) == 1 else COLUMN_WISE

    def generate(
        param: torch.nn.Parameter, local_size: int, world_size: int, device_type: str, sharder: Any
    ) -> ParameterSharding:
        rows = param.shape[0]
        metadata = [
            ShardMetadata(
                shard_offsets=[0, p.column_offset],
                shard_sizes=[rows, p.columns],
                placement=placement(device_type, p.rank, local_size),
            )
            for p in shards
        ]
        return ParameterSharding(
            sharding_type=sharding_type,
            compute_kernel=FUSED,
            ranks=[p.rank for p in shards],
            sharding_spec=EnumerableShardingSpec(metadata),
        )

    return generate


def _placements_of(table: Table, sharding: ParameterSharding) -> list[ShardPlacement]:
    if sharding.sharding_type not in _COLUMN_TYPES or sharding.sharding_spec is None:
        raise InputError(
            "sharding_type",
            f"table {table.name!r} is {sharding.sharding_type}",
            "only table_wise, column_wise and table_column_wise convert to AutoShard plans",
        )
    result = []
    for shard in sharding.sharding_spec.shards:  # type: ignore[attr-defined]
        if shard.shard_offsets[0] != 0 or shard.shard_sizes[0] != table.num_embeddings:
            raise InputError(
                "sharding_type",
                f"table {table.name!r} is split by rows",
                "only column splits convert to AutoShard plans",
            )
        result.append(ShardPlacement(shard.placement.rank(), shard.shard_offsets[1], shard.shard_sizes[1]))
    return result


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


def _in_column_order(
    found: dict[str, list[ShardPlacement]], tables: dict[str, Table]
) -> dict[str, tuple[ShardPlacement, ...]]:
    """Each table's shards sorted by column, in the order of ``tables``, checked to tile it."""
    result: dict[str, tuple[ShardPlacement, ...]] = {}
    for name, table in tables.items():
        shards = tuple(sorted(found[name], key=lambda p: p.column_offset))
        _check_columns(table, [(p.column_offset, p.columns) for p in shards])
        result[name] = shards
    return result


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


def _check_ranks(placements: dict[str, tuple[ShardPlacement, ...]], world_size: int) -> None:
    for name, shards in placements.items():
        for p in shards:
            if not 0 <= p.rank < world_size:
                raise InputError(
                    "world_size", f"table {name!r} is on device {p.rank}", f"use a world size above {p.rank}"
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
    "FUSED",
    "MODULE_PATH",
    "ShardPlacement",
    "TABLE_WISE",
    "embedding_bag_collection",
    "export_torchrec",
    "from_torchrec_plan",
    "parameter_constraints_from_export",
    "table_placements",
    "to_embedding_bag_configs",
    "to_parameter_constraints",
    "to_torchrec_plan",
]
