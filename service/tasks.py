"""What a planning worker receives and sends back: compact, picklable, and never an exception.

A task runs one or several planners (the cheap heuristics travel together, so a request pickles
its workload twice, not once per planner). Plans come back as table indices, not table objects:
rebuilding them in the server takes a tenth of the time of unpickling frozen tables.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.core.communication import CommunicationModel
from autoshard.core.errors import (
    AutoShardError,
    InputError,
    PlannerError,
    PlannerErrorKind,
)
from autoshard.core.model_error import DeviceErrors
from autoshard.core.sharding import ShardingType
from autoshard.core.types import (
    CostModel,
    DevicePlan,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
)
from autoshard.planners.incremental import CurrentPlacement, MoveBudget
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planning.options import Models, PlanOptions
from autoshard.planning.replan import ReplanReport, compare_replans
from autoshard.planning.runs import NON_FINITE, PlannerRun, RunOutcome, run_planners

if TYPE_CHECKING:
    from autoshard.rl.policy import OptionPolicy

log = logging.getLogger("autoshard.service")

Shard = tuple[int, int, int]
"""(table index in the workload, first column, columns)."""


@dataclass(frozen=True, slots=True)
class PlannerTask:
    """Planners to run one after another on one request's workload."""

    names: tuple[str, ...]
    workload: Workload
    topology: Topology
    profile: str | None
    deadline: float  # when its planners stop, before the request's deadline (time.monotonic(): one clock)
    seed: int = 0
    allow_column_split: bool | None = None  # PlannerContext's rule
    export: bool = False
    sharding_types: frozenset[ShardingType] = ALL_TYPES

    @property
    def options(self) -> PlanOptions:
        """The task as planning's options: no time budget of its own, its deadline for every planner."""
        return PlanOptions(
            self.names,
            self.seed,
            self.allow_column_split,
            deadline=self.deadline,
            sharding_types=self.sharding_types,
            torchrec_export=self.export,
        )


@dataclass(frozen=True, slots=True)
class CompactPlan:
    planner: str
    plan_time_s: float
    costs: tuple[float, ...]
    devices: tuple[tuple[Shard, ...], ...]
    partial: bool = False
    reused_s: float = 0.0

    @classmethod
    def of(cls, plan: ShardingPlan, index: dict[str, int]) -> CompactPlan:
        return cls(
            plan.planner,
            plan.plan_time_s,
            tuple(d.cost_ms for d in plan.devices),
            tuple(tuple(_compact(index[s.table.name], s) for s in d.shards) for d in plan.devices),
            plan.partial,
            plan.reused_s,
        )

    def plan(self, workload: Workload) -> ShardingPlan:
        tables = workload.tables
        devices = []
        for cost, shards in zip(self.costs, self.devices):
            devices.append(DevicePlan(tuple(_shard(tables[s[0]], s) for s in shards), cost))
        return ShardingPlan(
            self.planner, tuple(devices), self.plan_time_s, partial=self.partial, reused_s=self.reused_s
        )


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A typed error as plain data (the library's exceptions do not pickle with their fields)."""

    kind: str  # "planner", "input" or "internal"
    message: str
    planner_kind: str = ""
    fixes: tuple[str, ...] = ()
    field: str = ""
    fix: str = ""
    where: str = ""

    @classmethod
    def of(cls, error: Exception) -> ErrorInfo:
        if isinstance(error, PlannerError):
            return cls("planner", error.message, error.kind.value, tuple(error.fixes))
        if isinstance(error, InputError):
            return cls("input", error.message, field=error.field, fix=error.fix, where=error.where)
        return cls("internal", f"{type(error).__name__}: {error}")

    def exception(self) -> Exception:
        if self.kind == "planner":
            return PlannerError(PlannerErrorKind(self.planner_kind), self.message, self.fixes)
        if self.kind == "input":
            return InputError(self.field, self.message, self.fix, self.where)
        return RuntimeError(self.message)


@dataclass(frozen=True, slots=True)
class PlannerResult:
    name: str
    outcome: str  # ok, skipped, error, late (its task started after the deadline)
    seconds: float = 0.0
    plan: CompactPlan | None = None
    export: dict[str, Any] | None = None
    reason: str | None = None
    error: ErrorInfo | None = None


def run_task(
    task: PlannerTask,
    cost_model: CostModel | None,
    communication: CommunicationModel | None = None,
    policy: OptionPolicy | None = None,
) -> list[PlannerResult]:
    """The task's planners, run as ``autoshard.planning.plan.plan`` runs them
    (``autoshard.planning.runs.run_planners``: until the deadline, device costs with the
    all-to-all, a planner started only with as much time left as the longest before it took),
    each result made compact to travel back; never raises."""
    index = {t.name: i for i, t in enumerate(task.workload.tables)}
    runs = run_planners(
        task.names, task.workload, task.topology, Models(cost_model, communication, policy), task.options
    )
    return [_result(run, index) for run in runs]


def _result(run: PlannerRun, index: dict[str, int]) -> PlannerResult:
    return PlannerResult(
        run.name,
        run.outcome.value,
        run.seconds,
        None if run.plan is None else CompactPlan.of(run.plan, index),
        run.export,
        run.reason,
        None if run.error is None else ErrorInfo.of(run.error),
    )


def planner_run(result: PlannerResult, workload: Workload) -> PlannerRun:
    """A worker's result as the run it was (its plan rebuilt on ``workload``, its error re-raised as typed)."""
    return PlannerRun(
        result.name,
        RunOutcome(result.outcome),
        result.seconds,
        None if result.plan is None else result.plan.plan(workload),
        result.export,
        result.reason,
        None if result.error is None else result.error.exception(),
    )


@dataclass(frozen=True, slots=True)
class ReplanTask:
    """A re-plan to run in a planning worker (``autoshard.planning.replan.compare_replans``):
    each of its ``2 + len(budgets)`` plans may search for ``plan_budget_s``."""

    workload: Workload
    topology: Topology
    current: CurrentPlacement
    budgets: tuple[MoveBudget, ...]
    profile: str
    allow_split: bool
    plan_budget_s: float


@dataclass(frozen=True, slots=True)
class ReplanResult:
    """The report, or why there is none (never an exception: they may not pickle)."""

    report: ReplanReport | None = None
    error: ErrorInfo | None = None


def run_replan(
    task: ReplanTask,
    cost_model: CostModel,
    communication: CommunicationModel | None = None,
    device_errors: DeviceErrors | None = None,
) -> ReplanResult:
    """``compare_replans`` of the task; never raises."""
    try:
        report, plans = compare_replans(
            task.workload,
            task.topology,
            cost_model,
            task.current,
            task.budgets,
            task.allow_split,
            task.plan_budget_s,
            communication,
            device_errors,
        )
    except AutoShardError as error:
        return ReplanResult(error=ErrorInfo.of(error))
    except Exception as error:  # noqa: BLE001 - a bug must be a clear 500-free answer, and logged
        log.exception("replan failed")
        return ReplanResult(error=ErrorInfo.of(error))
    if not all(math.isfinite(d.cost_ms) for plan in plans for d in plan.devices):
        return ReplanResult(
            error=ErrorInfo(
                "input",
                NON_FINITE,
                field="tables",
                fix="plan tables within the profile's trained ranges",
            )
        )
    return ReplanResult(report)


__all__ = [
    "CompactPlan",
    "ErrorInfo",
    "PlannerResult",
    "PlannerTask",
    "ReplanResult",
    "ReplanTask",
    "planner_run",
    "run_replan",
    "run_task",
]


def _compact(index: int, shard: TableShard) -> tuple:
    """(table index, column offset, columns) of a table- or column-wise shard; with its rows,
    sharding type and lookup share after them for the other types."""
    if shard.rows is None and shard.sharding is None:
        return (index, shard.column_offset, shard.width)
    kind = None if shard.sharding is None else shard.sharding.value
    return (index, shard.column_offset, shard.width, shard.row_offset, shard.rows, kind, shard.lookup_share)


def _shard(table: Table, compact: tuple) -> TableShard:
    _, offset, columns, *rest = compact
    if not rest:
        return (
            TableShard(table) if offset == 0 and columns == table.embedding_dim else TableShard(table, offset, columns)
        )
    row_offset, rows, kind, share = rest
    whole = offset == 0 and columns == table.embedding_dim
    sharding = None if kind is None else ShardingType(kind)
    return TableShard(table, offset, None if whole else columns, row_offset, rows, sharding, share)
