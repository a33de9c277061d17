"""Service settings, from ``AUTOSHARD_*`` environment variables (pydantic-settings).

Every limit the service enforces is here, so an operator tunes it without code:

| variable | meaning | default |
| --- | --- | --- |
| ``AUTOSHARD_MODEL_DIR`` | folder of cost models: each ``<profile>/cost_model.pt`` is loaded | the checkout's ``data/models`` (wherever the server starts) |
| ``AUTOSHARD_DEFAULT_PROFILE`` | profile used when a request names none | ``<model_dir>/default``, else the only / first profile |
| ``AUTOSHARD_API_TOKEN`` | bearer token required by every ``/v1`` route; unset: no auth | unset |
| ``AUTOSHARD_MAX_TABLES`` | tables per request | 5000 |
| ``AUTOSHARD_MAX_DEVICES`` | devices per request | 1024 |
| ``AUTOSHARD_MAX_BODY_BYTES`` | request body size (413 past it) | 16 MiB |
| ``AUTOSHARD_PLAN_TIMEOUT_S`` | planning time budget per request, queueing included | 10 |
| ``AUTOSHARD_POOL`` | ``process``: planning processes (parallel, the event loop stays free); ``thread``: threads of the server process | ``process`` |
| ``AUTOSHARD_POOL_SIZE`` | planning processes (or threads) per server process | process: the CPU count; thread: 1 |
| ``AUTOSHARD_PLANNER_NICENESS`` | CPU niceness of planning processes: the event loop goes first | 10 |
| ``AUTOSHARD_PLAN_CACHE_SHARDS`` | answers of identical requests kept (``service.plan_cache``), by their tables x planners; 0 keeps none | 200000 |
| ``AUTOSHARD_FAIL_FAST`` | refuse to start when a model is missing or corrupt | false |
| ``AUTOSHARD_HOST`` / ``_PORT`` / ``_WORKERS`` | defaults of ``autoshard serve`` | 127.0.0.1 / 8000 / 1 |
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


SHIPPED_MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
"""The shipped profiles, found from the code rather than the working folder (as the CLI finds them)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUTOSHARD_", extra="ignore", frozen=True, protected_namespaces=())

    model_dir: Path = SHIPPED_MODELS
    default_profile: str | None = None
    api_token: SecretStr | None = None
    max_tables: int = Field(5000, ge=1)
    max_devices: int = Field(1024, ge=1)
    max_body_bytes: int = Field(16 * 1024**2, ge=1024)
    plan_timeout_s: float = Field(10.0, gt=0)
    pool: Literal["process", "thread"] = "process"
    pool_size: int | None = Field(None, ge=1)
    planner_niceness: int = Field(10, ge=0, le=19)
    plan_cache_shards: int = Field(200_000, ge=0)
    fail_fast: bool = False
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1)

    @property
    def planning_workers(self) -> int:
        """Threads share one core through the GIL, so more than one only adds contention."""
        if self.pool_size is not None:
            return self.pool_size
        return _cpu_count() if self.pool == "process" else 1

    @property
    def auth_enabled(self) -> bool:
        return self.api_token is not None and bool(self.api_token.get_secret_value())
