"""GET /healthz (the process answers) and GET /readyz (models loaded, or degraded and why)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import StateDep
from service.schemas.responses import HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz() -> HealthResponse:
    """Alive. Never touches the planning pool, so it answers while every planner is busy."""
    return HealthResponse(status="ok")


@router.get("/readyz", response_model=ReadyResponse)
async def readyz(state: StateDep) -> ReadyResponse:
    """`ready` when every model loaded; `degraded` (still 200: the heuristics serve) with the
    reasons when a model is missing or corrupt."""
    reasons = state.degraded_reasons
    return ReadyResponse(
        status="degraded" if reasons else "ready",
        reasons=reasons,
        default_planners=state.default_planners,
        profiles=list(state.store.models),
    )
