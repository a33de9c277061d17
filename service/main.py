"""Assembles the app: settings, lifespan (models loaded once), middleware, error handlers, routers.

Run it with ``autoshard serve``, or ``uvicorn --factory service.main:create_app``.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from service.deps import require_token
from service.errors import install_error_handlers
from service.limits import BodySizeLimitMiddleware
from service.metrics import Metrics, MetricsMiddleware
from service.routers import health, metrics, planners, plans, profiles, replans, web
from service.settings import Settings
from service.state import build_state

log = logging.getLogger("autoshard.service")

DESCRIPTION = """Shard DLRM embedding tables across devices: every planner side by side (heuristics,
the cost-model greedy, the RL planners `rl` and `rl+refine` when the profile has a policy,
TorchRec's planner on request), scored by one learned cost model per device profile; and
re-plans of a deployed plan for a changed workload that move few of its shards (`/v1/replans`).
Inputs the cost model extrapolates to come back as `warnings`.

Errors answer `{"detail": [{"loc", "msg", "type"}]}`: 422 names the field (a table the cost model
cannot answer, such as fp16 for a model trained on fp32, or the table that does not fit, and by
how much), 503 the planner or model that is missing, 504 a spent time budget.
"""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    import torch  # planning threads share the cores: one intra-op thread each

    torch.set_num_threads(1)
    settings: Settings = app.state.settings
    state = build_state(settings, app.state.metrics)
    try:
        await state.pool.start()
    except BaseException:
        state.pool.close()
        raise
    app.state.service = state
    # torch, torchrec and the models are hundreds of thousands of long-lived objects: keep the
    # collector from walking them (a full collection paused the event loop ~200 ms under load)
    gc.freeze()
    try:
        yield
    finally:
        state.pool.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(title="AutoShard", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = Metrics()
    install_error_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.include_router(health.router)
    app.include_router(metrics.router)
    v1: dict[str, Any] = {"prefix": "/v1", "dependencies": [Depends(require_token)]}
    app.include_router(plans.router, **v1)
    app.include_router(replans.router, **v1)
    app.include_router(planners.router, **v1)
    app.include_router(profiles.router, **v1)
    app.include_router(web.router)  # GET /: the planning page (service/static), which calls /v1 itself
    return app


def __getattr__(name: str) -> Any:
    """``service.main:app`` for tools that want an attribute: built on first access, never at import."""
    if name == "app":
        globals()["app"] = built = create_app()
        return built
    raise AttributeError(name)
