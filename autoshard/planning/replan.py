"""Re-plans side by side as a typed report (``ReplanReport``; ``to_dict()`` is its JSON), shared by
the CLI (`autoshard replan`) and the HTTP service (`POST /v1/replans`): the plan that keeps every
current shard, one re-plan per budget of moves, and cost_greedy's plan from scratch, each with what
it moves (``incremental``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.core.communication import CommunicationModel
from autoshard.core.costing import bound_to_task
from autoshard.core.model_error import DeviceErrors
from autoshard.core.sharding import ShardingType
from autoshard.core.types import FUSED_UVM_CACHING, CostModel, ShardingPlan, TableShard, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.incremental import (
    CurrentPlacement,
    Move,
    MoveBudget,
    TableLayout,
    moves_from,
)
from autoshard.planners.report import DeviceReport, TopologyReport
from autoshard.planning.compare import compare_planners
from autoshard.planning.replan_fit import fitted_replans


@dataclass(frozen=True, slots=True)
class PlacedShard:
    """A shard of a placement: its rank, column range and row range."""

    rank: int
    column_offset: int
    columns: int
    row_offset: int
    rows: int

    def to_dict(self) -> dict[str, int]:
        return {
            "rank": self.rank,
            "row_offset": self.row_offset,
            "rows": self.rows,
            "column_offset": self.column_offset,
            "columns": self.columns,
        }


@dataclass(frozen=True, slots=True)
class PlacedTable:
    """A table of a placement: its sharding type, kernel (and cache load factor) and shards."""

    layout: TableLayout
    shards: tuple[PlacedShard, ...]

    def to_dict(self) -> dict[str, Any]:
        layout, factor = self.layout, self.layout.cache_load_factor
        return {
            "sharding_type": layout.sharding_type.value,
            "compute_kernel": layout.compute_kernel,
            **({"cache_params": {"load_factor": factor}} if factor is not None else {}),
            "shards": [s.to_dict() for s in self.shards],
        }


@dataclass(frozen=True, slots=True)
class Placement:
    """A plan as a current placement: per table, its layout and shards in column, then row, order
    (``placement_of``)."""

    world_size: int
    tables: dict[str, PlacedTable]

    def to_dict(self) -> dict[str, Any]:
        """``{"world_size", "tables": {name: {"sharding_type", "compute_kernel", ["cache_params"],
        "shards": [{"rank", "row_offset", "rows", "column_offset", "columns"}]}}}``, the part of a
        TorchRec export that ``CurrentPlacement.from_export`` reads."""
        return {"world_size": self.world_size, "tables": {name: t.to_dict() for name, t in self.tables.items()}}


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
    (kept, *moved), running = fitted_replans(
        workload,
        topology,
        cost_model,
        current,
        [MoveBudget(0), *budgets],
        ["keep", *(b.label for b in budgets)],
        time_budget_s,
        allow_split,
        communication,
        unchecked=1,
    )
    cost_model = bound_to_task(cost_model, workload, topology) or cost_model  # TorchRec's: priced per task
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
        *((p, moves_from(current, p, running, topology)) for p in scratch),
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
    """The plan as a current placement (``Placement``): each table's layout (TorchRec's sharding
    type: table_wise for one whole shard, column_wise for column slices, else its shards'; its
    kernel: dense for data parallel), and its shards in column, then row, order."""
    found: dict[str, list[tuple[int, TableShard]]] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            found.setdefault(shard.table.name, []).append((rank, shard))
    return Placement(len(plan.devices), {name: _placed_table(parts) for name, parts in found.items()})


DENSE = "dense"
"""TorchRec's kernel of data-parallel tables (a placement names it as an export does)."""


def _placed_table(parts: list[tuple[int, TableShard]]) -> PlacedTable:
    table, kind = parts[0][1].table, parts[0][1].sharding_type
    if kind is ShardingType.TABLE_WISE and len(parts) > 1:
        kind = ShardingType.COLUMN_WISE
    factor = table.load_factor if table.compute_kernel == FUSED_UVM_CACHING else None
    shards = sorted(
        (PlacedShard(rank, s.column_offset, s.width, s.row_offset, s.height) for rank, s in parts),
        key=lambda p: (p.column_offset, p.row_offset, p.rank),
    )
    kernel = DENSE if kind is ShardingType.DATA_PARALLEL else table.compute_kernel
    return PlacedTable(TableLayout(kind, kernel, factor), tuple(shards))
