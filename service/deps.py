"""Dependencies the routes declare: the service state, and the optional bearer token."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.state import ServiceState

_bearer = HTTPBearer(auto_error=False, description="Needed when the service sets AUTOSHARD_API_TOKEN.")


async def get_state(request: Request) -> ServiceState:
    """(``async``, as every dependency here: a plain ``def`` would cost each request a thread hop.)"""
    return request.app.state.service


StateDep = Annotated[ServiceState, Depends(get_state)]


async def require_token(
    state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """401 unless the request carries ``Authorization: Bearer <AUTOSHARD_API_TOKEN>`` (when set)."""
    settings = state.settings
    if not settings.auth_enabled:
        return
    expected = settings.api_token.get_secret_value().encode()  # type: ignore[union-attr]
    given = credentials.credentials.encode() if credentials is not None else b""
    if not secrets.compare_digest(given, expected):
        raise HTTPException(
            401,
            "missing or wrong bearer token: send 'Authorization: Bearer <token>' "
            "with the token the service was started with (AUTOSHARD_API_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )
