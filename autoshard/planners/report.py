"""Plans as JSON-ready dicts, shared by the CLI and the HTTP service."""

from __future__ import annotations

from typing import Any, Sequence

from autoshard.types import ShardingPlan, TableShard, Topology, Workload


def shard_label(shard: TableShard) -> str:
    """``name`` for a whole table, ``name[a:b]`` for a column shard."""
    if shard.width == shard.table.embedding_dim:
        return shard.table.name
    return f"{shard.table.name}[{shard.column_offset}:{shard.column_offset + shard.width}]"


def plan_to_dict(plan: ShardingPlan, best: bool = False) -> dict[str, Any]:
    out = {"planner": plan.planner, "max_cost_ms": plan.max_cost_ms, "imbalance": plan.imbalance,
           "plan_time_s": plan.plan_time_s, "reused_s": plan.reused_s, "best": best, "partial": plan.partial,
           "devices": [{"tables": [shard_label(s) for s in d.shards], "cost_ms": d.cost_ms,
                        "memory_bytes": d.memory_bytes} for d in plan.devices]}
    if plan.own_estimate_ms:  # e.g. TorchRec's perf model, next to ours
        out["own_estimate_max_ms"] = max(plan.own_estimate_ms)
    return out


def plans_report(workload: Workload, topology: Topology, plans: Sequence[ShardingPlan],
                 skipped: Sequence[tuple[str, str]] = (), cost_unit: str = "ms") -> dict[str, Any]:
    """Several plans of one workload side by side; the one with the lowest max cost (the first,
    on a tie) is flagged ``best``. ``skipped`` lists (planner, reason)."""
    best = min(range(len(plans)), key=lambda i: plans[i].max_cost_ms) if plans else -1
    return {"workload": {"name": workload.name, "tables": len(workload.tables),
                         "batch_size": workload.batch_size, "memory_bytes": workload.memory_bytes},
            "topology": {"num_devices": topology.num_devices,
                         "device_memory_gb": topology.device_memory_gb},
            "cost_unit": cost_unit,
            "plans": [plan_to_dict(p, i == best) for i, p in enumerate(plans)],
            "skipped": [{"planner": name, "reason": reason} for name, reason in skipped]}
