"""POST /v1/replans: re-plan the plan running today for a changed workload, moving few of its shards
(``autoshard.planners.incremental``, as `autoshard replan` does)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Response

from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import Topology, Workload
from autoshard.planners.incremental import CurrentPlacement, MoveBudget
from service.deps import StateDep
from service.errors import FieldError, PlanningTimeout, infeasible_error, input_error_at
from service.inputs import check_inputs, parse_body, resolve_profile
from service.planning import PlanningUnavailable
from service.routers.plans import ERRORS, RETURN_MARGIN
from service.schemas.requests import ReplanRequest
from service.schemas.responses import ReplanResponse
from service.tasks import ErrorInfo, ReplanTask

router = APIRouter(tags=["plans"])

TOPOLOGY_FIELDS = ("num_devices", "num_hosts", "devices_per_host", "device_memory_gb")


@router.post(
    "/replans",
    response_model=ReplanResponse,
    responses=ERRORS,
    summary="Re-plan the plan running today for a changed workload, moving few shards",
)
async def create_replans(body: ReplanRequest, state: StateDep) -> Response:
    """Keep every shard of `current_plan` where it is, place the workload's new tables (they may split
    column-wise where the model predicts it pays), then move at most each `max_moves` budget of the
    kept shards where that lowers the predicted max. Beside each budget's plan: the plan that keeps
    every shard, and cost_greedy's plan from scratch, each with the shards and bytes it moves. Each
    plan's `placement` is the `current_plan` of the next re-plan. A current plan that cannot hold on
    the topology (a rank past its devices, a device over its memory) is a 422 at `topology`; a new
    table that fits nowhere beside the kept shards, a 422 naming it."""
    arrived = time.monotonic()
    settings = state.settings
    budget = min(body.time_budget_s or settings.plan_timeout_s, settings.plan_timeout_s)
    workload, topology = parse_body(body, settings)
    model = resolve_profile(state, body.profile, body.compute_device, body.ddr_cap_gb)
    if model is None:
        raise PlannerError(
            PlannerErrorKind.UNAVAILABLE,
            "re-planning needs a cost model, and this service loaded none",
            ("start the service with a profile's cost model (GET /v1/profiles)",),
        )
    warnings = check_inputs(model, workload)
    try:
        current = CurrentPlacement.from_export(body.current_plan.model_dump(), "current_plan")
    except InputError as error:
        raise FieldError(("body", "current_plan", error.field), str(error), "value_error") from None
    max_bytes = None if body.max_moved_gb is None else int(body.max_moved_gb * 2**30)
    budgets = tuple(MoveBudget(shards, max_bytes) for shards in sorted(set(body.max_moves)))
    task = ReplanTask(
        workload,
        topology,
        current,
        budgets,
        model.profile,
        body.allow_column_split,
        budget * (1 - RETURN_MARGIN) / (2 + len(budgets)),
    )
    try:
        result = await state.pool.replan(task, arrived + budget - time.monotonic())
    except TimeoutError:
        raise PlanningTimeout(budget, ["replan"]) from None
    except PlanningUnavailable as error:
        raise PlannerError(PlannerErrorKind.UNAVAILABLE, str(error), ("retry the request",)) from None
    if result.report is None:
        assert result.error is not None
        raise _located(result.error, workload, topology)
    answer = {
        **result.report.to_dict(),
        "profile": model.profile,
        "warnings": warnings,
        "elapsed_s": time.monotonic() - arrived,
    }
    return Response(ReplanResponse.model_validate(answer).model_dump_json(), media_type="application/json")


def _located(error: ErrorInfo, workload: Workload, topology: Topology) -> Exception:
    """The worker's error as the answer: the current plan against the topology at ``topology``; a
    table that fits nowhere as an infeasible workload; anything else as the library raised it."""
    found = error.exception()
    if isinstance(found, InputError) and found.field in TOPOLOGY_FIELDS:
        return FieldError(
            ("body", "topology", found.field), str(found), "value_error", {"fix": found.fix} if found.fix else None
        )
    if isinstance(found, InputError):
        return input_error_at(found, ("body", "workload"))
    if isinstance(found, PlannerError) and found.kind is not PlannerErrorKind.UNAVAILABLE:
        return infeasible_error(found, workload, topology)
    if isinstance(found, PlannerError):
        return found
    return PlannerError(
        PlannerErrorKind.UNAVAILABLE,
        f"re-planning failed: {found} (logged)",
        ("retry the request", "report it with the request if it persists"),
    )
