"""POST /v1/plans: every planner side by side on one workload and topology."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import parse_sharding_types
from autoshard.core.types import Topology, Workload
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.feasibility import check_total
from autoshard.planners.placement_rules import ConstraintsConflict, check_constraints
from autoshard.planners.placement_unit import proxy_costs
from autoshard.planners.proxies import ProxyCostModel, size_proxy
from autoshard.planners.report import plans_report
from autoshard.planners.sharding_options import ALL_TYPES, ROW_TYPES
from autoshard.planners.stats import plan_stats
from autoshard.planners.unit_preparation import prepare_units
from autoshard.planning.compare import shard_warnings
from autoshard.planning.registry import HEURISTICS
from autoshard.profiles import LoadedModel
from service.deps import StateDep
from service.errors import FieldError, PlanningTimeout, infeasible_error, input_error_at
from service.inputs import check_inputs, parse_body, resolve_profile
from service.plan_cache import Answer
from service.planning import PlanningOutcome, PlanningUnavailable
from service.schemas.requests import Format, PlanRequest
from service.schemas.responses import ErrorResponse, PlanResponse
from service.state import ServiceState
from service.tasks import PlannerTask

PROXY_UNIT = "proxy: dim x pooling summed per device (no cost model)"

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
    deadline = arrived + budget
    workload, topology = parse_body(body, settings)
    model = resolve_profile(state, body.profile)
    warnings = check_inputs(model, workload)
    names = state.planners_for(body.planners, model)
    sharding_types = ALL_TYPES if body.sharding_types is None else parse_sharding_types(body.sharding_types)
    try:
        check_constraints(workload, topology, sharding_types)
    except ConstraintsConflict as error:
        raise FieldError(
            ("body", "workload", error.field),
            error.message,
            "infeasible.constraints_conflict",
            {"kind": error.kind.value, "fixes": list(error.fixes)},
        ) from None
    except InputError as error:  # a pin past the topology
        raise input_error_at(error, ("body", "workload", "placement")) from None
    try:
        if sharding_types & ROW_TYPES:  # a table too large for a device can be row-sharded
            check_total(workload.memory_bytes, topology)
        else:
            prepare_units(
                workload,
                topology,
                proxy_costs(size_proxy),  # with splits if any planner may split
                PlannerContext(allow_column_split=body.allow_column_split).any_splits,
            )
    except PlannerError as error:  # it cannot fit, whatever the planner
        raise infeasible_error(error, workload, topology) from None
    if format == "torchrec":
        _check_torchrec()

    async def plan() -> Answer:
        stop = deadline - RETURN_MARGIN * budget
        tasks = [
            PlannerTask(
                group,
                workload,
                topology,
                model.profile if model else None,
                stop,
                body.seed,
                body.allow_column_split,
                format == "torchrec",
                sharding_types,
            )
            for group in _task_groups(state, names)
        ]
        try:
            outcome = await state.pool.run(tasks, deadline - time.monotonic(), arrived)
        except PlanningUnavailable as error:
            raise PlannerError(PlannerErrorKind.UNAVAILABLE, str(error), ("retry the request",)) from None
        for name, (seconds, result) in outcome.seconds.items():
            state.metrics.observe_planner(name, seconds, result)
        for name in outcome.timed_out:
            state.metrics.planner_runs.labels(name, "timeout").inc()
        if not outcome.plans:
            _raise_no_plan(outcome, budget, workload, topology)
        return _render(_response(workload, topology, outcome, model, warnings, body.stats))

    answer, source = await state.cache.get_or_plan(key, plan, len(workload.tables) * len(names))
    return _send(state, answer, source, arrived)


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


def _raise_no_plan(outcome: PlanningOutcome, budget: float, workload: Workload, topology: Topology) -> None:
    if outcome.timed_out:
        raise PlanningTimeout(budget, outcome.timed_out)
    for error in outcome.errors:
        if isinstance(error, PlannerError):
            if error.kind is PlannerErrorKind.TIME_BUDGET:
                raise PlanningTimeout(budget, [name for name, _ in outcome.skipped])
            if error.kind is PlannerErrorKind.UNAVAILABLE:
                raise error
            raise infeasible_error(error, workload, topology)
        if isinstance(error, InputError):
            raise input_error_at(error, ("body", "workload"))
    raise RuntimeError("no planner returned a plan: " + "; ".join(f"{n}: {r}" for n, r in outcome.skipped))


def _response(
    workload: Workload,
    topology: Topology,
    outcome: PlanningOutcome,
    model: LoadedModel | None,
    warnings: list[str],
    stats: bool = False,
) -> PlanResponse:
    """``plans_report`` (shared with the CLI), plus structured shards, the TorchRec exports, the
    best planner and its improvement over each heuristic, the time-budget flags and, with
    ``stats``, the best plan's ``plan_stats``; validated against ``PlanResponse`` (the schema is
    enforced, not only documented)."""
    plans = outcome.plans
    report = plans_report(
        workload,
        topology,
        plans,
        outcome.skipped,
        "ms" if model else PROXY_UNIT,
        model.device_errors if model else None,
        model.communication if model else None,
    )
    best_name = next(e.planner for e in report.plans if e.best)
    best = next(p for p in plans if p.planner == best_name)
    answer = report.to_dict(shards=True)
    for plan, entry in zip(plans, answer["plans"]):
        entry["torchrec"] = outcome.exports.get(plan.planner)
        if stats and plan is best:  # this thread's own use of the model: planning threads use their copies
            entry["stats"] = plan_stats(
                plan,
                workload,
                topology,
                model.model if model else ProxyCostModel(),
                model.communication if model else None,
                model.device_errors if model else None,
                report.cost_unit,
            ).to_dict()
    answer.update(
        profile=model.profile if model else None,
        best=best.planner,
        improvement_over={
            p.planner: (1.0 - best.max_cost_ms / p.max_cost_ms) if p.max_cost_ms > 0 else 0.0
            for p in plans
            if p.planner in HEURISTICS
        },
        partial=bool(outcome.timed_out) or any(p.partial for p in plans),
        timed_out=outcome.timed_out,
        warnings=[*warnings, *shard_warnings(model.model if model else None, plans)],
        elapsed_s=0.0,  # the request's own is added per answer (a kept answer serves many)
    )
    return PlanResponse.model_validate(answer)
