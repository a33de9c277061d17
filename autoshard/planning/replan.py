"""Re-plans side by side as a typed report (``ReplanReport``; ``to_dict()`` is its JSON), shared by
the CLI (`autoshard replan`) and the HTTP service (`POST /v1/replans`): the plan that keeps every
current shard, one re-plan per budget of moves, and cost_greedy's plan from scratch, each with what
it moves (``incremental``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.costing import bound_to_task
from autoshard.core.model_error import DeviceErrors
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.incremental import (
    CurrentPlacement,
    Move,
    MoveBudget,
    moves_from,
    replans,
)
from autoshard.planners.report import DeviceReport, TopologyReport
from autoshard.planning.compare import compare_planners


@dataclass(frozen=True, slots=True)
class PlacedShard:
    """A shard of a placement: its rank and column range."""

    rank: int
    column_offset: int
    columns: int

    def to_dict(self) -> dict[str, int]:
        return {"rank": self.rank, "column_offset": self.column_offset, "columns": self.columns}


@dataclass(frozen=True, slots=True)
class Placement:
    """A plan as a current placement: per table, its shards in column order (``placement_of``)."""

    world_size: int
    tables: dict[str, tuple[PlacedShard, ...]]

    def to_dict(self) -> dict[str, Any]:
        """``{"world_size", "tables": {name: {"shards": [{"rank", "column_offset", "columns"}]}}}``, the
        part of a TorchRec export that ``CurrentPlacement.from_export`` reads."""
        return {
            "world_size": self.world_size,
            "tables": {name: {"shards": [s.to_dict() for s in shards]} for name, shards in self.tables.items()},
        }


@dataclass(frozen=True, slots=True)
class ReplanRow:
    """One plan of a ``ReplanReport`` (``replan_row``)."""

    plan: str
    max_cost_ms: float
    expected_max_ms: float | None
    partial: bool
    plan_time_s: float
    shards_moved: int
    bytes_moved: int
    moves: tuple[Move, ...]
    devices: tuple[DeviceReport, ...]
    placement: Placement

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "max_cost_ms": self.max_cost_ms,
            "expected_max_ms": self.expected_max_ms,
            "partial": self.partial,
            "plan_time_s": self.plan_time_s,
            "shards_moved": self.shards_moved,
            "bytes_moved": self.bytes_moved,
            "moves": [
                {"shard": m.shard, "from_rank": m.from_rank, "to_rank": m.to_rank, "memory_bytes": m.memory_bytes}
                for m in self.moves
            ],
            "devices": [d.to_dict(shards=True) for d in self.devices],
            "placement": self.placement.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class ReplanReport:
    """Re-plans side by side (``compare_replans``): keep, a re-plan per budget, cost_greedy from scratch."""

    workload: str
    tables: int
    topology: TopologyReport
    max_moves: tuple[int, ...]
    max_moved_bytes: int | None
    dropped: tuple[str, ...]
    replaced: tuple[str, ...]
    new_tables: tuple[str, ...]
    plans: tuple[ReplanRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "tables": self.tables,
            "topology": self.topology.to_dict(),
            "max_moves": list(self.max_moves),
            "max_moved_bytes": self.max_moved_bytes,
            "dropped": list(self.dropped),
            "replaced": list(self.replaced),
            "new_tables": list(self.new_tables),
            "plans": [r.to_dict() for r in self.plans],
        }


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
) -> tuple[ReplanReport, list[ShardingPlan]]:
    """The report and its plans, in its order: keep (0 moves), a re-plan per budget (as given),
    cost_greedy from scratch (column splits as ``allow_split`` says). Costs include
    ``communication``'s all-to-all; each plan's expected max comes from ``device_errors``."""
    cost_model = bound_to_task(cost_model, workload, topology) or cost_model  # TorchRec's: priced per task
    scorer = cost_model if communication is None else WithCommunication(cost_model, communication, topology)
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
    priced = (communication, workload.batch_size) if communication else None
    rows = [
        (kept.plan, kept.moves),
        *((r.plan, r.moves) for r in moved),
        *((p, moves_from(current, p, workload)) for p in scratch),
    ]
    report = ReplanReport(
        workload.name,
        len(workload.tables),
        TopologyReport.of(topology),
        tuple(b.shards for b in budgets),
        budgets[0].max_bytes if budgets else None,
        tuple(kept.dropped),
        tuple(kept.replaced),
        tuple(t.name for t in workload.tables if not current.of_table(t.name)),
        tuple(replan_row(plan, moves, device_errors, topology, priced) for plan, moves in rows),
    )
    return report, [plan for plan, _ in rows]


def replan_row(
    plan: ShardingPlan,
    moves: Sequence[Move],
    device_errors: DeviceErrors | None,
    topology: Topology | None = None,
    priced: tuple[CommunicationModel, int] | None = None,
) -> ReplanRow:
    """One plan of the report: its costs, its moves, its devices, and itself as a current placement
    (what ``CurrentPlacement.from_export`` reads: the next re-plan starts from it)."""
    costs = [d.cost_ms for d in plan.devices]
    return ReplanRow(
        plan.planner,
        plan.max_cost_ms,
        device_errors.expected_max(costs) if device_errors else None,
        plan.partial,
        plan.plan_time_s,
        len(moves),
        sum(m.memory_bytes for m in moves),
        tuple(moves),
        DeviceReport.all_of(plan, topology, priced),
        placement_of(plan),
    )


def placement_of(plan: ShardingPlan) -> Placement:
    """The plan as a current placement (``Placement``): each table's shards, in column order."""
    tables: dict[str, list[PlacedShard]] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            tables.setdefault(shard.table.name, []).append(PlacedShard(rank, shard.column_offset, shard.width))
    return Placement(
        len(plan.devices),
        {name: tuple(sorted(shards, key=lambda s: s.column_offset)) for name, shards in tables.items()},
    )
