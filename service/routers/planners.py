"""GET /v1/planners: every planner the service knows, whether it can run here, and which run by default."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import StateDep
from service.schemas.responses import ErrorResponse, PlannerOut, PlannersResponse

router = APIRouter(tags=["planners"])


@router.get(
    "/planners",
    response_model=PlannersResponse,
    responses={401: {"model": ErrorResponse, "description": "Missing or wrong bearer token."}},
)
async def list_planners(state: StateDep) -> PlannersResponse:
    """Heuristics, cost_greedy (needs a cost model), rl and rl+refine (need a policy; ``policy``
    names it), torchrec (when installed; runs when asked), and any planner registered later."""
    return PlannersResponse(
        planners=[
            PlannerOut(
                name=p.name,
                kind=p.kind.value,
                available=p.available,
                default=p.default,
                reason=p.reason,
                policy=p.policy,
            )
            for p in state.planners.values()
        ],
        default_profile=state.store.default_profile,
    )
