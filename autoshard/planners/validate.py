"""Is a plan valid for a workload and a topology?"""

from __future__ import annotations

from autoshard.core.constraints import Constraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import ShardingPlan, Table, TableShard, Topology, Workload
from autoshard.planners.feasibility import fmt_bytes


def validate_plan(plan: ShardingPlan, workload: Workload, topology: Topology) -> None:
    """Raise ``InputError`` unless the plan has one entry per device, places every table of the
    workload under one sharding type, its shards covering its rows and columns exactly once on
    distinct devices (a data-parallel table: a whole replica on every device), holds nothing
    else, and fits every device's memory (each its own cap)."""
    fix = "plan with one of the autoshard planners, or fix the plan by hand"
    if len(plan.devices) != topology.num_devices:
        raise InputError(
            "devices",
            f"the plan has {len(plan.devices)} devices, the topology {topology.num_devices}",
            fix,
            where=plan.planner,
        )
    tables = {t.name: t for t in workload.tables}
    pieces: dict[str, list[tuple[TableShard, int]]] = {name: [] for name in tables}
    for d, device in enumerate(plan.devices):
        capacity = topology.device_memory_bytes_of(d)
        where = f"{plan.planner} devices[{d}]"
        for shard in device.shards:
            name = shard.table.name
            if tables.get(name) != shard.table:
                raise InputError(
                    "tables",
                    f"table {name!r} is not a table of workload {workload.name!r} (or differs from it)",
                    fix,
                    where,
                )
            _check_bounds(shard, fix, where)
            pieces[name].append((shard, d))
        if device.memory_bytes > capacity:
            raise InputError(
                "memory",
                f"holds {fmt_bytes(device.memory_bytes)}, more than the device's {fmt_bytes(capacity)}",
                fix,
                where,
            )
    for name, parts in pieces.items():
        if not parts:
            raise InputError("tables", f"table {name!r} is not placed", fix, plan.planner)
        kinds = {s.sharding_type for s, _ in parts} - {ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE}
        if len(kinds) > 1 or (kinds and len({s.sharding_type for s, _ in parts}) > 1):
            raise InputError(
                "tables", f"table {name!r} mixes sharding types {sorted(k.value for k in kinds)}", fix, plan.planner
            )
        if len({d for _, d in parts}) != len(parts):
            raise InputError("tables", f"two shards of table {name!r} are on one device", fix, plan.planner)
        if kinds == {ShardingType.DATA_PARALLEL}:
            if len(parts) != topology.num_devices:
                raise InputError(
                    "tables",
                    f"data-parallel table {name!r} has {len(parts)} replicas, not {topology.num_devices}",
                    fix,
                    plan.planner,
                )
            continue
        _check_cover(tables[name], [s for s, _ in parts], fix, plan.planner)


def _check_bounds(shard: TableShard, fix: str, where: str) -> None:
    table = shard.table
    columns_ok = (
        shard.column_offset >= 0 and shard.width >= 1 and shard.column_offset + shard.width <= table.embedding_dim
    )
    rows_ok = shard.row_offset >= 0 and shard.height >= 1 and shard.row_offset + shard.height <= table.num_embeddings
    if not (columns_ok and rows_ok):
        raise InputError(
            "tables",
            f"shard of {table.name!r} has rows [{shard.row_offset}:{shard.row_offset + shard.height}] and columns "
            f"[{shard.column_offset}:{shard.column_offset + shard.width}] outside "
            f"[0:{table.num_embeddings}] x [0:{table.embedding_dim}]",
            fix,
            where,
        )


def _check_cover(table: Table, shards: list[TableShard], fix: str, where: str) -> None:
    """The shards' column blocks tile the columns, and each block's row blocks tile the rows."""
    blocks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s in shards:
        blocks.setdefault((s.column_offset, s.width), []).append((s.row_offset, s.height))
    _check_tiling(sorted(blocks), table.embedding_dim, "columns", f"of table {table.name!r}", fix, where)
    for (offset, width), rows in blocks.items():
        of = f"of table {table.name!r} (columns {offset}:{offset + width})"
        _check_tiling(sorted(rows), table.num_embeddings, "rows", of, fix, where)


def _check_tiling(spans: list[tuple[int, int]], size: int, noun: str, of: str, fix: str, where: str) -> None:
    end = 0
    for offset, length in spans:
        if offset != end:
            problem = "covered twice" if offset < end else "missing"
            raise InputError("tables", f"{noun} {of} are {problem} at {min(offset, end)}", fix, where)
        end = offset + length
    if end != size:
        raise InputError("tables", f"{noun} {end}:{size} {of} are not placed", fix, where)


def check_plan_constraints(plan: ShardingPlan, constraints: Constraints) -> None:
    """``PlannerError`` naming the table when a table's sharding type is not among those its
    constraints allow, or a column block of it is narrower than its ``min_partition``. AutoShard's
    planners honour both; TorchRec's may not (on ``cpu`` its sharders offer no row-wise type), so
    planning checks every plan before it can be the best."""
    for device in plan.devices:
        for shard in device.shards:
            name, kind = shard.table.name, shard.sharding_type
            own = constraints.of(name)
            if own is None:
                continue
            allowed = own.allowed_types(frozenset(ShardingType))
            if kind not in allowed:
                raise PlannerError(
                    PlannerErrorKind.UNAVAILABLE,
                    f"table {name!r} allows sharding types {sorted(k.value for k in allowed)}, "
                    f"but the plan gives it {kind.value!r}",
                    ("plan with another planner", f"or allow {kind.value!r} for {name!r}"),
                )
            cut = shard.width != shard.table.embedding_dim
            if own.min_partition is not None and cut and shard.width < own.min_partition:
                raise PlannerError(
                    PlannerErrorKind.UNAVAILABLE,
                    f"table {name!r} has a column block of {shard.width} columns, below its min_partition "
                    f"{own.min_partition}",
                    ("lower min_partition", "or plan without column splits (allow_column_split=False)"),
                )
