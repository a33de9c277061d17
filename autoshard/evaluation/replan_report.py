"""Re-plans side by side, as JSON-ready dicts, shared by the CLI (`autoshard replan`) and the HTTP
service (`POST /v1/replans`): the plan that keeps every current shard, one re-plan per budget of
moves, and cost_greedy's plan from scratch, each with what it moves (``incremental``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.model_error import DeviceErrors
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.evaluation.compare import compare_planners
from autoshard.planners.context import PlannerContext
from autoshard.planners.incremental import (
    CurrentPlacement,
    Move,
    MoveBudget,
    moves_from,
    replans,
)
from autoshard.planners.report import shard_label


def compare_replans(
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    current: CurrentPlacement,
    budgets: Sequence[MoveBudget],
    allow_split: bool = True,
    time_budget_s: float | None = None,
    communication: CommunicationModel | None = None,
    device_errors: DeviceErrors | None = None,
) -> tuple[dict[str, Any], list[ShardingPlan]]:
    """The report and its plans, in its order: keep (0 moves), a re-plan per budget (as given),
    cost_greedy from scratch (column splits as ``allow_split`` says). Costs include
    ``communication``'s all-to-all; each plan's expected max comes from ``device_errors``."""
    scorer = cost_model if communication is None else WithCommunication(cost_model, communication, topology.num_devices)
    kept, *moved = replans(
        workload,
        topology,
        scorer,
        current,
        [MoveBudget(0), *budgets],
        ["keep", *(b.label for b in budgets)],
        time_budget_s,
        allow_split,
    )
    scratch = compare_planners(
        workload,
        topology,
        ["cost_greedy"],
        PlannerContext(cost_model, allow_column_split=None if allow_split else False, time_budget_s=time_budget_s),
        communication,
    ).plans
    rows = [
        (kept.plan, kept.moves),
        *((r.plan, r.moves) for r in moved),
        *((p, moves_from(current, p, workload)) for p in scratch),
    ]
    report = {
        "workload": workload.name,
        "tables": len(workload.tables),
        "topology": {"num_devices": topology.num_devices, "device_memory_gb": topology.device_memory_gb},
        "max_moves": [b.shards for b in budgets],
        "max_moved_bytes": budgets[0].max_bytes if budgets else None,
        "dropped": list(kept.dropped),
        "replaced": list(kept.replaced),
        "new_tables": [t.name for t in workload.tables if not current.of_table(t.name)],
        "plans": [replan_row(plan, moves, device_errors) for plan, moves in rows],
    }
    return report, [plan for plan, _ in rows]


def replan_row(plan: ShardingPlan, moves: Sequence[Move], device_errors: DeviceErrors | None) -> dict[str, Any]:
    """One plan of the report: its costs, its moves, its devices, and itself as a current placement
    (what ``CurrentPlacement.from_export`` reads: the next re-plan starts from it)."""
    costs = [d.cost_ms for d in plan.devices]
    return {
        "plan": plan.planner,
        "max_cost_ms": plan.max_cost_ms,
        "expected_max_ms": device_errors.expected_max(costs) if device_errors else None,
        "partial": plan.partial,
        "plan_time_s": plan.plan_time_s,
        "shards_moved": len(moves),
        "bytes_moved": sum(m.memory_bytes for m in moves),
        "moves": [
            {"shard": m.shard, "from_rank": m.from_rank, "to_rank": m.to_rank, "memory_bytes": m.memory_bytes}
            for m in moves
        ],
        "devices": [
            {
                "tables": [shard_label(s) for s in d.shards],
                "shards": [
                    {"table": s.table.name, "column_offset": s.column_offset, "columns": s.width} for s in d.shards
                ],
                "cost_ms": d.cost_ms,
                "memory_bytes": d.memory_bytes,
            }
            for d in plan.devices
        ],
        "placement": placement_of(plan),
    }


def placement_of(plan: ShardingPlan) -> dict[str, Any]:
    """The plan as a current placement: ``{"world_size", "tables": {name: {"shards": [{"rank",
    "column_offset", "columns"}]}}}``, the part of a TorchRec export that ``CurrentPlacement`` reads."""
    tables: dict[str, dict[str, list[dict[str, int]]]] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            tables.setdefault(shard.table.name, {"shards": []})["shards"].append(
                {"rank": rank, "column_offset": shard.column_offset, "columns": shard.width}
            )
    for entry in tables.values():
        entry["shards"].sort(key=lambda s: s["column_offset"])
    return {"world_size": len(plan.devices), "tables": tables}
