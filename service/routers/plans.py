"""POST /v1/plans: every planner side by side on one workload and topology."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import parse_sharding_types
from autoshard.core.types import Topology, Workload
from autoshard.planners.context import PlannerKind
from autoshard.planners.placement_rules import ConstraintsConflict
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planning.options import Models, PlanOptions
from autoshard.planning.plan import NoPlanInTime, Runner, plan
from autoshard.planning.report import PlanningReport
from autoshard.planning.runs import PlannerRun, RunOutcome
from autoshard.profiles import LoadedModel
from service.deps import StateDep
from service.errors import FieldError, PlanningTimeout, infeasible_error, input_error_at
from service.inputs import parse_body, resolve_profile
from service.plan_cache import Answer
from service.planning import PlanningUnavailable
from service.schemas.requests import Format, PlanRequest
from service.schemas.responses import ErrorResponse, PlanResponse
from service.state import ServiceState
from service.tasks import PlannerTask

router = APIRouter(tags=["plans"])

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer token (when the service has one)."},
    413: {"model": ErrorResponse, "description": "Body larger than AUTOSHARD_MAX_BODY_BYTES."},
    422: {
        "model": ErrorResponse,
        "description": "A bad field (its path in `loc`), a service limit, a table "
        "the profile's cost model cannot answer (e.g. a precision it was "
        "not trained on), or a workload that does not fit the topology "
        "(the table and the shortfall).",
    },
    503: {
        "model": ErrorResponse,
        "description": "A planner asked for cannot run here (its cost model or "
        "policy is missing or corrupt, or torchrec is not installed).",
    },
    504: {"model": ErrorResponse, "description": "No planner finished within the time budget."},
}


@router.post(
    "/plans",
    response_model=PlanResponse,
    responses=ERRORS,
    summary="Plan a workload with several planners side by side",
)
async def create_plans(
    body: PlanRequest,
    request: Request,
    state: StateDep,
    format: Annotated[Format, Query(description="`torchrec` adds each plan's TorchRec sharding export.")] = "json",
) -> Response:
    """Place the workload's tables on the topology's devices with each planner asked for (default:
    every planner loaded, cheap heuristics first), score every plan with one cost model, and say
    which is best and by how much it beats each heuristic. Tables the cost model cannot answer
    are a 422 naming the table and the field; inputs it extrapolates to come back in `warnings`.
    When the time budget runs out, the plans that finished come back flagged `partial` (504 if
    none did)."""
    arrived = time.monotonic()
    key = _cache_key(await request.body(), format)
    kept = state.cache.peek(key)
    if kept is not None:  # this very body was validated and planned by this server before
        return _send(state, kept, "hit", arrived)
    settings = state.settings
    budget = min(body.time_budget_s or settings.plan_timeout_s, settings.plan_timeout_s)
    workload, topology = parse_body(body, settings)
    model = resolve_profile(state, body.profile, body.compute_device, body.ddr_cap_gb)
    names = state.planners_for(body.planners, model)
    if format == "torchrec":
        _check_torchrec()
    options = PlanOptions(
        tuple(names),
        body.seed,
        body.allow_column_split,
        deadline=arrived + budget - RETURN_MARGIN * budget,  # planners stop then, so that the answer is in time
        sharding_types=ALL_TYPES if body.sharding_types is None else parse_sharding_types(body.sharding_types),
        stats=body.stats,
        torchrec_export=format == "torchrec",
    )
    runner = PoolRunner(state, model.profile if model else None, arrived, budget, asyncio.get_running_loop())

    async def answer() -> Answer:
        try:
            report = await asyncio.to_thread(_plan, state, workload, topology, model, options, runner)
        except (InputError, PlannerError) as error:
            raise _located(error, budget, workload, topology) from None
        return _render(PlanResponse.model_validate({**report.to_dict(detail=True), "elapsed_s": 0.0}))

    answer_, source = await state.cache.get_or_plan(key, answer, len(workload.tables) * len(names))
    return _send(state, answer_, source, arrived)


def _plan(
    state: ServiceState,
    workload: Workload,
    topology: Topology,
    model: LoadedModel | None,
    options: PlanOptions,
    runner: Runner,
) -> PlanningReport:
    """``autoshard.planning.plan.plan``, in a thread of the event loop's executor: the cost model
    that checks the tables and prices the stats is this thread's own copy (its caches are not
    safe to share); the planners run in the planning pool (``runner``)."""
    own = state.store.for_thread(model.profile) if model else None
    return plan(workload, topology, Models.of(model, own), options, runner)


class PoolRunner:
    """Runs a request's planners in the planning pool (``Runner``), from the thread that plans
    the request: in worker tasks (``_task_groups``) until the request's deadline, each planner's
    time and outcome counted in the metrics."""

    def __init__(
        self, state: ServiceState, profile: str | None, arrived: float, budget: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.state, self.profile, self.arrived, self.budget, self.loop = state, profile, arrived, budget, loop

    def __call__(
        self, names: Sequence[str], workload: Workload, topology: Topology, options: PlanOptions
    ) -> list[PlannerRun]:
        assert options.deadline is not None  # the request's, less its margin
        tasks = [
            PlannerTask(
                group,
                workload,
                topology,
                self.profile,
                options.deadline,
                options.seed,
                options.allow_column_split,
                options.torchrec_export,
                options.sharding_types,
            )
            for group in _task_groups(self.state, names)
        ]
        left = self.arrived + self.budget - time.monotonic()
        running = asyncio.run_coroutine_threadsafe(self.state.pool.run(tasks, left, self.arrived), self.loop)
        try:
            outcome = running.result()
        except PlanningUnavailable as error:
            raise PlannerError(PlannerErrorKind.UNAVAILABLE, str(error), ("retry the request",)) from None
        metrics = self.state.metrics
        for run in outcome.runs:
            if run.outcome is RunOutcome.LATE:
                metrics.planner_runs.labels(run.name, "timeout").inc()
            elif run.name not in outcome.worker_failed:
                metrics.observe_planner(run.name, run.seconds, run.outcome.value)
        return outcome.runs


RETURN_MARGIN = 0.2
"""Planners stop this share of the budget before the request's deadline, so that a search cut
short still comes back within the budget: past its budget a planner finishes its placement and
scores its plan (5.3-5.7 s under a 5 s budget on 3,000 tables x 512 devices; docs/decisions.md,
23), then the trip from the worker. (A planner that ends before its
budget, as on most requests, loses nothing.)"""


def _task_groups(state: ServiceState, names: Sequence[str]) -> list[tuple[str, ...]]:
    """A request's planners as worker tasks: the heuristics together (a millisecond or two each);
    cost_greedy, rl and rl+refine together, since rl+refine starts from the other two's
    placements (``autoshard.planners.task_cache``); any other planner (TorchRec's) on its own."""
    kinds = {n: state.planners[n].kind for n in names}
    heuristics = tuple(n for n in names if kinds[n] is PlannerKind.HEURISTIC)
    modelled = tuple(n for n in names if kinds[n] in (PlannerKind.COST_MODEL, PlannerKind.POLICY))
    others = [(n,) for n in names if n not in heuristics and n not in modelled]
    return [group for group in (heuristics, modelled) if group] + others


CACHE_HEADER = "X-AutoShard-Cache"


def _cache_key(raw_body: bytes, format: Format) -> str:
    """What fixes a request's answer on this server: its body as sent (budget and seed included)
    and the format. The rest (the profiles, the planners that can run, the limits) is fixed when
    the server starts (``service.plan_cache``)."""
    return hashlib.sha256(format.encode() + b"\0" + raw_body).hexdigest()


def _render(checked: PlanResponse) -> Answer:
    """The answer rendered once: a kept answer is sent as these bytes, with each request's ``elapsed_s``."""
    return Answer(checked.model_dump_json(exclude={"elapsed_s"}).encode(), checked.partial)


def _send(state: ServiceState, answer: Answer, source: str, arrived: float) -> Response:
    state.metrics.plan_cache.labels(source).inc()
    return Response(
        answer.body(time.monotonic() - arrived), media_type="application/json", headers={CACHE_HEADER: source}
    )


def _check_torchrec() -> None:
    try:
        import autoshard.torchrec.bridge  # noqa: F401
    except (ImportError, OSError) as error:
        raise PlannerError(
            PlannerErrorKind.UNAVAILABLE,
            f"format=torchrec needs torchrec, which this service cannot import ({error})",
            ("ask for format=json", "install the torchrec extra in the service's image"),
        ) from None


def _located(error: InputError | PlannerError, budget: float, workload: Workload, topology: Topology) -> Exception:
    """What ``plan`` refused, as the answer: at the body's field that holds it (a table, a
    placement pin, a constraint), a workload that cannot fit as infeasible (422), a planner that
    cannot run as unavailable (503), no plan in time as a timeout (504)."""
    if isinstance(error, InputError):
        if error.where == "placement":  # a pin past the topology
            unplaced = InputError(error.field, error.message, error.fix)
            return input_error_at(unplaced, ("body", "workload", "placement"))
        return input_error_at(error, ("body", "workload"))
    if isinstance(error, NoPlanInTime):
        return PlanningTimeout(budget, list(error.planners))
    if isinstance(error, ConstraintsConflict):
        ctx = {"kind": error.kind.value, "fixes": list(error.fixes)}
        return FieldError(("body", "workload", error.field), error.message, "infeasible.constraints_conflict", ctx)
    if error.kind is PlannerErrorKind.UNAVAILABLE:
        return error
    return infeasible_error(error, workload, topology)
