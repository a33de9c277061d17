"""Errors as HTTP answers. Every error body reads ``{"detail": [{"loc", "msg", "type", "ctx"?}]}``.

| cause | status |
| --- | --- |
| a bad field (schema or ``autoshard.core.types`` rules), a service limit, an unknown planner or profile | 422 |
| a table the profile's cost model cannot answer (``check_workload``: e.g. fp16 for an fp32 model) | 422, at the table's field |
| an infeasible topology (``PlannerError``: not enough memory) | 422, naming the table and the shortfall |
| a planner that cannot run here (its cost model or policy is missing or corrupt, torchrec not installed) | 503 |
| a model file that cannot be used (``ModelError``) | 503 |
| no plan within the time budget | 504 |
| a body over the size limit | 413 |
| a missing or wrong bearer token | 401 |
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from autoshard.core.errors import InputError, ModelError, PlannerError, PlannerErrorKind
from autoshard.core.types import Topology, Workload
from autoshard.planners.feasibility import fmt_bytes

log = logging.getLogger("autoshard.service")
Loc = tuple[str | int, ...]


class FieldError(Exception):
    """A 422 about one place in the request."""

    def __init__(
        self, loc: Loc, msg: str, type_: str = "value_error", ctx: dict[str, Any] | None = None, status: int = 422
    ) -> None:
        super().__init__(msg)
        self.loc, self.msg, self.type, self.ctx, self.status = loc, msg, type_, ctx, status


class PlanningTimeout(Exception):
    """No planner finished within the time budget."""

    def __init__(self, budget_s: float, planners: Sequence[str]) -> None:
        self.budget_s, self.planners = budget_s, tuple(planners)
        super().__init__(
            f"no plan within the time budget of {budget_s:g} s (planners not finished: {', '.join(planners)})"
        )


_INDEXED = re.compile(r"^(\w+)\[(\d+)\]")


def input_error_at(error: InputError, prefix: Loc) -> FieldError:
    """An ``InputError`` from ``autoshard.core.workload_file`` / ``types`` located in the request body:
    ``where`` = "tables[3] 'x'" becomes ``prefix + ("tables", 3)``, then the field."""
    loc: list[str | int] = list(prefix)
    where = error.where or ""
    found = _INDEXED.match(where)
    if found:
        loc += [found.group(1), int(found.group(2))]
    elif where.startswith("topology") and prefix[-1:] != ("topology",):
        loc.append("topology")
    skip = {"table", "workload", found.group(1) if found else None}
    if error.field and error.field not in skip and loc[-1:] != [error.field]:
        loc.append(error.field)
    return FieldError(tuple(loc), str(error), "value_error", {"fix": error.fix} if error.fix else None)


def infeasible_error(error: PlannerError, workload: Workload, topology: Topology) -> FieldError:
    """A 422 for a workload that does not fit: the planner's message and fixes, plus the table (the
    largest), what it needs, what a device offers and the shortfall in bytes."""
    capacity = topology.device_memory_bytes
    index, largest = max(enumerate(workload.tables), key=lambda p: (p[1].memory_bytes, -p[0]))
    ctx: dict[str, Any] = {"kind": error.kind.value, "fixes": list(error.fixes), "device_memory_bytes": capacity}
    if error.kind is PlannerErrorKind.INSUFFICIENT_MEMORY and workload.memory_bytes > topology.num_devices * capacity:
        shortfall = workload.memory_bytes - topology.num_devices * capacity
        summary = (
            f"short by {fmt_bytes(shortfall)} in total; the largest table is {largest.name!r} "
            f"({fmt_bytes(largest.memory_bytes)})"
        )
        loc: Loc = ("body", "topology")
        ctx.update(
            table=largest.name,
            shortfall_bytes=shortfall,
            need_bytes=workload.memory_bytes,
            available_bytes=topology.num_devices * capacity,
        )
    elif largest.memory_bytes > capacity:
        shortfall = largest.memory_bytes - capacity
        summary = f"table {largest.name!r} is {fmt_bytes(shortfall)} larger than one device"
        loc = ("body", "workload", "tables", index)
        ctx.update(
            table=largest.name, shortfall_bytes=shortfall, need_bytes=largest.memory_bytes, available_bytes=capacity
        )
    else:
        summary, loc = "", ("body", "topology")
    fixes = "; ".join(f"{i}. {fix}" for i, fix in enumerate(error.fixes, 1))
    msg = f"{error.message}" + (f" ({summary})" if summary else "") + (f". Fixes: {fixes}" if fixes else "")
    return FieldError(loc, msg, f"infeasible.{error.kind.value}", ctx)


def _body(loc: Loc, msg: str, type_: str, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"loc": list(loc), "msg": msg, "type": type_}
    if ctx:
        item["ctx"] = ctx
    return {"detail": [item]}


def error_response(
    status: int,
    loc: Loc,
    msg: str,
    type_: str,
    ctx: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(_body(loc, msg, type_, ctx), status_code=status, headers=headers)


def _safe(value: Any) -> Any:
    """JSON-safe context values (pydantic puts exceptions and other objects there)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return str(value)


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    detail = []
    content_type = request.headers.get("content-type", "")
    for error in exc.errors():
        item: dict[str, Any] = {
            "loc": list(error.get("loc", ())),
            "msg": error.get("msg", "invalid"),
            "type": error.get("type", "value_error"),
        }
        if tuple(item["loc"]) == ("body",) and "json" not in content_type:  # a form, text, or no body at all
            item["msg"] += (
                f"; send the request body as JSON with Content-Type: application/json "
                f"(got {content_type or 'no Content-Type'!r})"
            )
        if error.get("ctx"):
            item["ctx"] = {k: _safe(v) for k, v in error["ctx"].items()}
        detail.append(item)
    return JSONResponse({"detail": detail}, status_code=422)


async def _field(request: Request, exc: FieldError) -> JSONResponse:
    return error_response(exc.status, exc.loc, exc.msg, exc.type, exc.ctx)


async def _input(request: Request, exc: InputError) -> JSONResponse:
    return await _field(request, input_error_at(exc, ("body",)))


async def _planner(request: Request, exc: PlannerError) -> JSONResponse:
    ctx = {"kind": exc.kind.value, "fixes": list(exc.fixes)}
    if exc.kind is PlannerErrorKind.UNAVAILABLE:
        return error_response(503, ("body", "planners"), str(exc), "unavailable", ctx)
    return error_response(422, ("body",), str(exc), f"infeasible.{exc.kind.value}", ctx)


async def _model(request: Request, exc: ModelError) -> JSONResponse:
    return error_response(503, (), str(exc), "model_unavailable")


async def _timeout(request: Request, exc: PlanningTimeout) -> JSONResponse:
    return error_response(
        504,
        (),
        f"{exc}; ask for fewer planners, raise time_budget_s, or retry when the service is less busy",
        "timeout",
        {"budget_s": exc.budget_s, "planners": list(exc.planners)},
    )


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    kinds = {
        400: "body_unreadable",
        401: "unauthorized",
        404: "not_found",
        405: "method_not_allowed",
        413: "body_too_large",
    }
    loc: Loc = ("body",) if exc.status_code in (400, 413) else ()
    msg = str(exc.detail) + (
        ": send a UTF-8 JSON object as the schema at /docs describes" if exc.status_code == 400 else ""
    )
    return error_response(
        exc.status_code, loc, msg, kinds.get(exc.status_code, "http_error"), headers=getattr(exc, "headers", None)
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, (), "internal error (logged); please report it with the request", "internal")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(FieldError, _field)  # type: ignore[arg-type]
    app.add_exception_handler(InputError, _input)  # type: ignore[arg-type]
    app.add_exception_handler(PlannerError, _planner)  # type: ignore[arg-type]
    app.add_exception_handler(ModelError, _model)  # type: ignore[arg-type]
    app.add_exception_handler(PlanningTimeout, _timeout)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
