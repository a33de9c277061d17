"""Prometheus metrics: requests, latency per route and per planner, errors.

Each app has its own registry (tests build several apps in one process). With several uvicorn
workers, ``autoshard serve`` sets ``PROMETHEUS_MULTIPROC_DIR`` and /metrics sums every worker.
"""

from __future__ import annotations

import os
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
disable_created_metrics()  # no *_created series: they double the output for nothing
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "autoshard_http_requests", "HTTP requests by route and status.", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "autoshard_http_request_duration_seconds",
            "HTTP request latency by route.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.planner_latency = Histogram(
            "autoshard_planner_duration_seconds",
            "Time one planner took on one request.",
            ["planner"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.planner_runs = Counter(
            "autoshard_planner_runs",
            "Planner runs by outcome (ok, skipped, error, timeout).",
            ["planner", "outcome"],
            registry=r,
        )
        self.plan_cache = Counter(
            "autoshard_plan_cache",
            "Plan requests by where their answer came from "
            "(hit: kept; joined: an identical request in flight; miss: planned).",
            ["result"],
            registry=r,
        )
        self.errors = Counter(
            "autoshard_http_errors", "Error answers (status >= 400) by status.", ["status"], registry=r
        )
        self.degraded = Gauge(
            "autoshard_degraded", "1 when the service runs without some model.", registry=r, multiprocess_mode="max"
        )
        self.models = Gauge("autoshard_cost_models_loaded", "Cost models loaded.", registry=r, multiprocess_mode="max")

    def observe_planner(self, planner: str, seconds: float, outcome: str) -> None:
        self.planner_latency.labels(planner).observe(seconds)
        self.planner_runs.labels(planner, outcome).inc()

    def render(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template ('unmatched' for unknown paths,
    so random paths cannot blow up the label set)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # every route here is a static path: label by the path when one matched
            path = scope.get("path", "") if scope.get("route") is not None else "unmatched"
            method = scope.get("method", "")
            method = method if method in METHODS else "other"
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - started)
            self.metrics.requests.labels(method, path, str(status)).inc()
            if status >= 400:
                self.metrics.errors.labels(str(status)).inc()
