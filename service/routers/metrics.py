"""GET /metrics: Prometheus exposition (requests, latency per route and per planner, errors)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.metrics import CONTENT_TYPE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."}},
)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
