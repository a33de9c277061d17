"""Plans as JSON-ready dicts, shared by the CLI and the HTTP service."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoshard.core.model_error import DeviceErrors
from autoshard.core.types import ShardingPlan, TableShard, Topology, Workload


def shard_label(shard: TableShard) -> str:
    """``name`` for a whole table, ``name[a:b]`` for a column shard."""
    if shard.width == shard.table.embedding_dim:
        return shard.table.name
    return f"{shard.table.name}[{shard.column_offset}:{shard.column_offset + shard.width}]"


def plan_to_dict(plan: ShardingPlan, best: bool = False, device_errors: DeviceErrors | None = None) -> dict[str, Any]:
    """The plan; with ``device_errors``, its ``expected_max_ms`` under them (``DeviceErrors.expected_max``:
    what the model's measured error on each device leads to expect of the max), else None."""
    expected = device_errors.expected_max([d.cost_ms for d in plan.devices]) if device_errors else None
    out = {
        "planner": plan.planner,
        "max_cost_ms": plan.max_cost_ms,
        "expected_max_ms": expected,
        "imbalance": plan.imbalance,
        "plan_time_s": plan.plan_time_s,
        "reused_s": plan.reused_s,
        "best": best,
        "partial": plan.partial,
        "devices": [
            {"tables": [shard_label(s) for s in d.shards], "cost_ms": d.cost_ms, "memory_bytes": d.memory_bytes}
            for d in plan.devices
        ],
    }
    if plan.own_estimate_ms:  # e.g. TorchRec's perf model, next to ours
        out["own_estimate_max_ms"] = max(plan.own_estimate_ms)
    return out


TIE = 1e-6
"""Plans whose max cost is within this share of the lowest tie with it (one set priced by a
running accumulator and by a whole-set call differs in its last bits)."""


def costs_descending(plan: ShardingPlan) -> list[float]:
    """The plan's device costs, costliest first: plans tied on the max compare on the next ones."""
    return sorted((d.cost_ms for d in plan.devices), reverse=True)


def best_plan_index(plans: Sequence[ShardingPlan]) -> int:
    """The plan with the lowest max cost; of those tied with it (``TIE``), the one whose next
    costliest devices are lowest (a device near the max is the likeliest to measure above it),
    then the first. -1 for no plans."""
    if not plans:
        return -1
    lowest = min(p.max_cost_ms for p in plans)
    tied = [i for i, p in enumerate(plans) if p.max_cost_ms <= lowest * (1 + TIE)]
    return min(tied, key=lambda i: costs_descending(plans[i])[1:])


def plans_report(
    workload: Workload,
    topology: Topology,
    plans: Sequence[ShardingPlan],
    skipped: Sequence[tuple[str, str]] = (),
    cost_unit: str = "ms",
    device_errors: DeviceErrors | None = None,
) -> dict[str, Any]:
    """Several plans of one workload side by side; the ``best_plan_index`` one is flagged
    ``best``. ``skipped`` lists (planner, reason). With the profile's ``device_errors``, each
    plan's expected max under them, and their summary as ``model_error``."""
    best = best_plan_index(plans)
    return {
        "workload": {
            "name": workload.name,
            "tables": len(workload.tables),
            "batch_size": workload.batch_size,
            "memory_bytes": workload.memory_bytes,
        },
        "topology": {"num_devices": topology.num_devices, "device_memory_gb": topology.device_memory_gb},
        "cost_unit": cost_unit,
        "model_error": device_errors.summary() if device_errors else None,
        "plans": [plan_to_dict(p, i == best, device_errors) for i, p in enumerate(plans)],
        "skipped": [{"planner": name, "reason": reason} for name, reason in skipped],
    }
