"""GET /: the planning page, its static files, and the bundled workloads it offers as presets.

The page is plain HTML, CSS and JavaScript shipped in ``service/static`` (no build step, no
third-party code). It calls the API of the same origin (``/v1/planners``, ``/v1/profiles``,
``/v1/plans``) with the bearer token the user types, so it adds no way in: these routes serve
only files of the package, and carry no secret. A Content-Security-Policy keeps the page to its
own origin (scripts, styles and requests).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, JSONResponse

from autoshard.core.presets import PRESETS

router = APIRouter(tags=["web"], include_in_schema=False)

STATIC = resources.files("service") / "static"
"""The page's files: found from the package, installed or checked out."""

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _static_files() -> dict[str, str]:
    """Name -> path of every file the page may load: a fixed list, so no path reaches outside it."""
    return {
        entry.name: str(entry)
        for entry in STATIC.iterdir()
        if entry.is_file() and any(entry.name.endswith(suffix) for suffix in MEDIA_TYPES)
    }


FILES = _static_files()


def _file(name: str) -> FileResponse:
    path = FILES.get(name)
    if path is None:
        raise HTTPException(404, f"no page file {name!r}: the page's files are {', '.join(sorted(FILES))}")
    media_type = next(t for suffix, t in MEDIA_TYPES.items() if name.endswith(suffix))
    return FileResponse(path, media_type=media_type, headers=SECURITY_HEADERS)


@router.api_route("/", methods=["GET", "HEAD"])
async def page() -> FileResponse:
    """The planning page: paste a workload, choose a cluster and planners, compare their plans."""
    return _file("index.html")


@router.api_route("/static/{name}", methods=["GET", "HEAD"])
async def static_file(name: str) -> FileResponse:
    return _file(name)


@router.get("/web/presets")
async def presets() -> dict[str, list[str]]:
    """The bundled workloads' names (``autoshard plan <name>`` plans them too)."""
    return {"presets": list(PRESETS)}


@router.get("/web/presets/{name}")
async def preset(name: str) -> JSONResponse:
    """A bundled workload file as it ships: TorchRec's field names, as the page sends them."""
    if name not in PRESETS:
        raise HTTPException(404, f"no bundled workload {name!r}: use one of {', '.join(PRESETS)}")
    data: Any = json.loads((resources.files("autoshard.core.presets") / f"{name}.json").read_text())
    return JSONResponse(data, headers={"Cache-Control": "no-cache"})
