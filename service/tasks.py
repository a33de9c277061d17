"""What a planning worker receives and sends back: compact, picklable, and never an exception.

A task runs one or several planners (the cheap heuristics travel together, so a request pickles
its workload twice, not once per planner). Plans come back as table indices, not table objects:
rebuilding them in the server takes a tenth of the time of unpickling frozen tables.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.core.communication import CommunicationModel, WithCommunication
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
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.incremental import CurrentPlacement, MoveBudget
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.task_cache import TaskCache
from autoshard.planning.compare import compare_planners
from autoshard.planning.registry import PLANNERS
from autoshard.planning.replan import ReplanReport, compare_replans

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
    """Each planner of the task, until the deadline passes; device costs include the profile's
    all-to-all when it has a communication model. Searching planners get the time left as their
    budget, and return their best plan so far (``partial``) when it runs out. The task's
    planners share the placements they compute alike: the task owns their ``TaskCache``.

    A task answers only when its last planner is done, so a planner that overran the deadline
    would lose the plans of those before it: once a planner has planned, the next one starts
    only if at least as much time is left as the longest one so far took (the model task runs
    cost_greedy, rl and rl+refine, each at least as long as the one before, but for what they
    share); the others are ``late``. Consecutive heuristics plan in one ``compare_planners``
    call, under the same rule, so that one cost-model call scores all their plans."""
    index = {t.name: i for i, t in enumerate(task.workload.tables)}
    cache = TaskCache(task.workload, task.topology)
    if cost_model is not None and communication is not None:  # one priced model for the task's planners:
        # ``TaskCache`` hands out the units it costed by model, so that they are costed once
        cost_model = WithCommunication(cost_model, communication, task.topology)
    results: list[PlannerResult] = []
    for names in _batches(task.names):
        left = task.deadline - time.monotonic()
        if left <= 0 or (results and left < max(r.seconds for r in results)):
            results += [PlannerResult(name, "late") for name in names]
            continue

        def may_start(longest_s: float) -> bool:  # the same rule within a batch
            left = task.deadline - time.monotonic()
            return left > 0 and left >= max([longest_s, *(r.seconds for r in results)])

        context = PlannerContext(
            cost_model,
            policy,
            task.seed,
            task.allow_column_split,
            left,
            cache=cache,
            sharding_types=task.sharding_types,
        )
        results += _run_planners(names, task, context, index, may_start)
    return results


def _batches(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The task's planners in runs to plan together: consecutive heuristics in one (a millisecond
    each: their plans are scored by one cost-model call, ``compare_planners``), any other alone."""
    batches: list[tuple[str, ...]] = []
    for name in names:
        heuristic = name in PLANNERS and PLANNERS[name].kind is PlannerKind.HEURISTIC
        if heuristic and batches and all(PLANNERS[n].kind is PlannerKind.HEURISTIC for n in batches[-1]):
            batches[-1] += (name,)
        else:
            batches.append((name,))
    return batches


def _run_planners(
    names: tuple[str, ...],
    task: PlannerTask,
    context: PlannerContext,
    index: dict[str, int],
    may_start: Callable[[float], bool],
) -> list[PlannerResult]:
    """The planners ``names``, through ``compare_planners`` like the CLI (``context``'s cost model
    prices the all-to-all already); never raises. Each result's time is its plan's
    ``plan_time_s`` (the batch's time for a planner without a plan)."""
    started = time.perf_counter()

    def failed(outcome: str, reason: str, error: ErrorInfo | None = None) -> list[PlannerResult]:
        return [
            PlannerResult(name, outcome, time.perf_counter() - started, reason=reason, error=error) for name in names
        ]

    try:
        result = compare_planners(task.workload, task.topology, list(names), context, None, may_start)
    except AutoShardError as error:  # e.g. a table TorchRec cannot represent
        return failed("skipped", str(error), ErrorInfo.of(error))
    except Exception as error:  # noqa: BLE001 - one broken planner must not fail the others
        log.exception("planners %s failed", ", ".join(names))
        return failed(
            "error",
            f"internal error in planner {', '.join(map(repr, names))} ({type(error).__name__}; logged)",
            ErrorInfo.of(error),
        )
    plans = dict(zip(result.planned, result.plans))
    skipped = dict(result.skipped)
    errors = {name: error for (name, _), error in zip(result.skipped, result.errors)}
    elapsed = time.perf_counter() - started
    out = []
    for name in names:
        plan = plans.get(name)
        if name in result.not_started:
            out.append(PlannerResult(name, "late"))
        elif plan is None:
            failure = errors.get(name)
            out.append(
                PlannerResult(
                    name,
                    "skipped",
                    elapsed,
                    reason=skipped.get(name, "no plan"),
                    error=ErrorInfo.of(failure) if failure is not None else None,
                )
            )
        else:
            out.append(_result(name, plan, task, index, elapsed if len(names) == 1 else plan.plan_time_s))
    return out


def _result(name: str, plan: ShardingPlan, task: PlannerTask, index: dict[str, int], seconds: float) -> PlannerResult:
    if not all(math.isfinite(d.cost_ms) for d in plan.devices):
        return PlannerResult(
            name,
            "error",
            seconds,
            reason="the cost model predicted a non-finite cost: the tables are far outside what it was trained on",
        )
    export = None
    if task.export:
        from autoshard.torchrec.bridge import export_torchrec

        try:
            export = export_torchrec(plan, task.workload, task.topology.local_world_size)
        except AutoShardError as error:  # e.g. a table TorchRec cannot represent
            return PlannerResult(name, "skipped", seconds, reason=str(error), error=ErrorInfo.of(error))
    return PlannerResult(name, "ok", seconds, plan=CompactPlan.of(plan, index), export=export)


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
                "the cost model predicted a non-finite cost: the tables are far outside what it was trained on",
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
