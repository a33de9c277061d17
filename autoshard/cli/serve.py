"""`autoshard serve`: the planning service (FastAPI under uvicorn).

Options default to the service settings (``AUTOSHARD_HOST``, ``AUTOSHARD_PORT``,
``AUTOSHARD_WORKERS``, ``AUTOSHARD_MODEL_DIR``; see ``service/settings.py``). Workers keep no
state between requests, so several can run behind one socket or a load balancer. SIGTERM stops
it gracefully (requests in flight finish) with exit code 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from autoshard.cli.support import friendly_errors
from autoshard.core.errors import InputError

GRACEFUL_SHUTDOWN_S = 8  # under the 10 s a container engine waits after SIGTERM
SERVER, LOGGING = "Server", "Logging"  # help panels


@friendly_errors
def serve(
    host: Annotated[
        str | None,
        typer.Option(help="Interface to listen on (default: AUTOSHARD_HOST or 127.0.0.1).", rich_help_panel=SERVER),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Port (default: AUTOSHARD_PORT or 8000).", rich_help_panel=SERVER),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Worker processes (default: AUTOSHARD_WORKERS or 1).", rich_help_panel=SERVER),
    ] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of <profile>/cost_model.pt (default: AUTOSHARD_MODEL_DIR or the checkout's data/models).",
            rich_help_panel=SERVER,
        ),
    ] = None,
    access_log: Annotated[bool, typer.Option(help="Log every request.", rich_help_panel=LOGGING)] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.", rich_help_panel=LOGGING)] = "info",
) -> None:
    """Serve the planners over HTTP: POST /v1/plans, /v1/replans, GET /v1/planners, /v1/profiles, /healthz,
    /readyz, /metrics; OpenAPI at /docs."""
    import uvicorn

    if model_dir is not None:  # the workers read their settings from the environment
        os.environ["AUTOSHARD_MODEL_DIR"] = str(model_dir.resolve())
    settings = _settings()
    if settings.fail_fast:
        _refuse_to_start_degraded(settings)
    workers = workers or settings.workers
    metrics_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # /metrics sums the workers
        metrics_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="autoshard-metrics-")
    _exit_cleanly_on_stop_signals()
    try:
        uvicorn.run(
            "service.main:create_app",
            factory=True,
            host=host or settings.host,
            port=settings.port if port is None else port,
            workers=workers,
            lifespan="on",
            access_log=access_log,
            log_level=log_level,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _settings():
    """The service settings from the environment; ``InputError`` naming the first bad variable."""
    from pydantic import ValidationError

    from service.settings import Settings

    try:
        return Settings()
    except ValidationError as error:
        first = error.errors()[0]
        name = "AUTOSHARD_" + str(first["loc"][0]).upper()
        raise InputError(
            name,
            f"{first['msg']} (got {first.get('input')!r})",
            f"set {name} to a valid value (each is listed in service/settings.py), or unset it",
        ) from None


def _refuse_to_start_degraded(settings) -> None:
    """``AUTOSHARD_FAIL_FAST``: the service would refuse to start, so say why here (a clean exit 2)
    rather than as a traceback from inside uvicorn's start-up."""
    from autoshard.core.errors import ModelError
    from autoshard.profiles import load_models
    from service.state import ServiceState, planner_catalog

    store = load_models(settings.model_dir, settings.default_profile)
    reasons = ServiceState.reasons_for(store, planner_catalog(store))
    if reasons:
        raise ModelError("refusing to start (AUTOSHARD_FAIL_FAST): " + "; ".join(reasons))


def _exit_cleanly_on_stop_signals() -> None:
    """Exit 0 on SIGTERM / SIGINT. uvicorn handles them itself while it serves (a graceful
    shutdown), then re-raises the signal once it is done; this handler turns that, or a signal
    during start-up, into a clean exit, so a container engine sees exit code 0."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
