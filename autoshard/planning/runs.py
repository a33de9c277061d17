"""Run named planners on one task under a deadline: what ``autoshard.planning.plan.plan`` runs in
its own process, and what each of the service's planning workers runs for its share of a request.

A run never raises for a planner: each planner's outcome (``PlannerRun``) says whether it planned,
was skipped (its needs unmet, the workload infeasible for it), failed (a bug, logged) or started
too late to finish before the deadline.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from autoshard.core.communication import WithCommunication
from autoshard.core.errors import AutoShardError, PlannerError
from autoshard.core.types import ShardingPlan, Topology, Workload
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.task_cache import TaskCache
from autoshard.planners.validate import check_plan_constraints
from autoshard.planning.compare import compare_planners
from autoshard.planning.options import Models, PlanOptions
from autoshard.planning.registry import PLANNERS

log = logging.getLogger("autoshard.planning")

NON_FINITE = "the cost model predicted a non-finite cost: the tables are far outside what it was trained on"


class RunOutcome(str, Enum):
    """How one planner's run ended (the service's metrics label them by value)."""

    OK = "ok"  # it planned
    SKIPPED = "skipped"  # it could not plan this task: its needs unmet, or the workload infeasible for it
    ERROR = "error"  # it failed (a bug; logged)
    LATE = "late"  # not started: too little time was left before the deadline


@dataclass(frozen=True, slots=True)
class PlannerRun:
    """One planner's run: its plan (``OK``), or why there is none (``reason``, and the typed
    error where there is one). ``seconds``: how long it took (its plan's ``plan_time_s`` where it
    planned beside others). ``export``: the plan as TorchRec sharding, where asked for."""

    name: str
    outcome: RunOutcome
    seconds: float = 0.0
    plan: ShardingPlan | None = None
    export: dict[str, Any] | None = None
    reason: str | None = None
    error: Exception | None = None


def run_planners(
    names: Sequence[str], workload: Workload, topology: Topology, models: Models, options: PlanOptions
) -> list[PlannerRun]:
    """Each planner of ``names`` in turn on ``workload`` and ``topology``, with ``models``'
    cost model (its device costs plus the all-to-all when ``models.communication`` is there),
    policy and ``options``; never raises. The planners share the placements they compute alike
    (one ``TaskCache``).

    Searching planners get ``options.time_budget_s`` or the time left before ``options.deadline``,
    whichever is less, and return their best plan so far (``partial``) when it runs out. Once a
    planner has planned, the next one starts only if at least as much time is left as the
    longest one so far took (a caller that answers when the last is done would otherwise lose
    the plans before it); the others are ``LATE``. Consecutive heuristics plan in one
    ``compare_planners`` call, under the same rule, so that one cost-model call scores all their
    plans."""
    cache = TaskCache(workload, topology)
    cost_model = models.cost_model
    if cost_model is not None and models.communication is not None:  # one priced model for every planner:
        # ``TaskCache`` hands out the units it costed by model, so that they are costed once
        cost_model = WithCommunication(cost_model, models.communication, topology)
    runs: list[PlannerRun] = []
    for batch in _batches(tuple(names)):
        left = _time_left(options)
        if left <= 0 or (runs and left < max(r.seconds for r in runs)):
            runs += [PlannerRun(name, RunOutcome.LATE) for name in batch]
            continue

        def may_start(longest_s: float) -> bool:  # the same rule within a batch
            left = _time_left(options)
            return left > 0 and left >= max([longest_s, *(r.seconds for r in runs)])

        budget = left if options.time_budget_s is None else min(options.time_budget_s, left)
        context = PlannerContext(
            cost_model,
            models.policy,
            options.seed,
            options.allow_column_split,
            None if math.isinf(budget) else budget,
            options.departure_margin,
            cache=cache,
            sharding_types=options.sharding_types,
        )
        runs += _run_batch(batch, workload, topology, context, options.torchrec_export, may_start)
    return runs


def _time_left(options: PlanOptions) -> float:
    return math.inf if options.deadline is None else options.deadline - time.monotonic()


def _batches(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The planners in runs to plan together: consecutive heuristics in one (a millisecond each:
    their plans are scored by one cost-model call, ``compare_planners``), any other alone."""
    batches: list[tuple[str, ...]] = []
    for name in names:
        heuristic = name in PLANNERS and PLANNERS[name].kind is PlannerKind.HEURISTIC
        if heuristic and batches and all(PLANNERS[n].kind is PlannerKind.HEURISTIC for n in batches[-1]):
            batches[-1] += (name,)
        else:
            batches.append((name,))
    return batches


def _run_batch(
    names: tuple[str, ...],
    workload: Workload,
    topology: Topology,
    context: PlannerContext,
    export: bool,
    may_start: Callable[[float], bool],
) -> list[PlannerRun]:
    """The planners ``names`` through one ``compare_planners`` call (``context``'s cost model
    prices the all-to-all already); never raises. Each run's time is its plan's ``plan_time_s``
    (the batch's time for a planner without a plan, or alone in its batch)."""
    started = time.perf_counter()

    def failed(outcome: RunOutcome, reason: str, error: Exception) -> list[PlannerRun]:
        return [PlannerRun(name, outcome, time.perf_counter() - started, reason=reason, error=error) for name in names]

    try:
        result = compare_planners(workload, topology, list(names), context, None, may_start)
    except AutoShardError as error:  # e.g. a table TorchRec cannot represent
        return failed(RunOutcome.SKIPPED, str(error), error)
    except Exception as error:  # noqa: BLE001 - one broken planner must not fail the others
        log.exception("planners %s failed", ", ".join(names))
        reason = f"internal error in planner {', '.join(map(repr, names))} ({type(error).__name__}; logged)"
        return failed(RunOutcome.ERROR, reason, error)
    plans = dict(zip(result.planned, result.plans))
    skipped = dict(result.skipped)
    errors = {name: error for (name, _), error in zip(result.skipped, result.errors)}
    elapsed = time.perf_counter() - started
    runs = []
    for name in names:
        plan = plans.get(name)
        if name in result.not_started:
            runs.append(PlannerRun(name, RunOutcome.LATE))
        elif plan is None:
            reason = skipped.get(name, "no plan")
            runs.append(PlannerRun(name, RunOutcome.SKIPPED, elapsed, reason=reason, error=errors.get(name)))
        else:
            seconds = elapsed if len(names) == 1 else plan.plan_time_s
            runs.append(_planned(name, plan, workload, topology, seconds, export))
    return runs


def _planned(
    name: str, plan: ShardingPlan, workload: Workload, topology: Topology, seconds: float, export: bool
) -> PlannerRun:
    """The run of a planner that planned: refused if the model priced a device at no finite
    cost, skipped if the plan breaks the workload's constraints (``check_plan_constraints``);
    with ``export``, the plan as TorchRec sharding (skipped if TorchRec cannot hold it)."""
    if not all(math.isfinite(d.cost_ms) for d in plan.devices):
        return PlannerRun(name, RunOutcome.ERROR, seconds, reason=NON_FINITE)
    try:  # TorchRec's planner may break a constraint its sharders cannot meet: never the best then
        check_plan_constraints(plan, workload.constraints)
    except PlannerError as error:
        return PlannerRun(name, RunOutcome.SKIPPED, seconds, reason=error.message, error=error)
    exported = None
    if export:
        from autoshard.torchrec.bridge import export_torchrec

        try:
            exported = export_torchrec(plan, workload, topology.local_world_size)
        except AutoShardError as error:  # e.g. a table TorchRec cannot represent
            return PlannerRun(name, RunOutcome.SKIPPED, seconds, reason=str(error), error=error)
    return PlannerRun(name, RunOutcome.OK, seconds, plan=plan, export=exported)
