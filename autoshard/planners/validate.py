"""Is a plan valid for a workload and a topology?"""

from __future__ import annotations

from autoshard.core.errors import InputError
from autoshard.core.types import ShardingPlan, Topology, Workload
from autoshard.planners.feasibility import fmt_bytes


def validate_plan(plan: ShardingPlan, workload: Workload, topology: Topology) -> None:
    """Raise ``InputError`` unless the plan has one entry per device, places every table of the
    workload exactly once (its column shards cover its columns exactly once, on distinct
    devices), holds nothing else, and fits every device's memory (each its own cap)."""
    fix = "plan with one of the autoshard planners, or fix the plan by hand"
    if len(plan.devices) != topology.num_devices:
        raise InputError(
            "devices",
            f"the plan has {len(plan.devices)} devices, the topology {topology.num_devices}",
            fix,
            where=plan.planner,
        )
    tables = {t.name: t for t in workload.tables}
    pieces: dict[str, list[tuple[int, int, int]]] = {name: [] for name in tables}
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
            if (
                shard.column_offset < 0
                or shard.width < 1
                or shard.column_offset + shard.width > shard.table.embedding_dim
            ):
                raise InputError(
                    "tables",
                    f"shard of {name!r} has columns [{shard.column_offset}:"
                    f"{shard.column_offset + shard.width}] outside [0:{shard.table.embedding_dim}]",
                    fix,
                    where,
                )
            pieces[name].append((shard.column_offset, shard.width, d))
        if device.memory_bytes > capacity:
            raise InputError(
                "memory",
                f"holds {fmt_bytes(device.memory_bytes)}, more than the device's {fmt_bytes(capacity)}",
                fix,
                where,
            )
    for name, parts in pieces.items():
        parts.sort()
        if not parts:
            raise InputError("tables", f"table {name!r} is not placed", fix, plan.planner)
        end = 0
        for offset, width, _ in parts:
            if offset != end:
                raise InputError(
                    "tables",
                    f"columns of table {name!r} are "
                    f"{'covered twice' if offset < end else 'missing'} at {min(offset, end)}",
                    fix,
                    plan.planner,
                )
            end = offset + width
        if end != tables[name].embedding_dim:
            raise InputError(
                "tables",
                f"columns {end}:{tables[name].embedding_dim} of table {name!r} are not placed",
                fix,
                plan.planner,
            )
        if len({d for _, _, d in parts}) != len(parts):
            raise InputError("tables", f"two shards of table {name!r} are on one device", fix, plan.planner)
