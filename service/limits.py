"""The request body size limit: 413 before the body is read when Content-Length says it is too
large, and while reading when a chunked body grows past it."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"request body larger than this service's limit of {limit:,} bytes "
            "(AUTOSHARD_MAX_BODY_BYTES); send fewer tables per request",
        )


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPExceptions from body reading; its handler answers 413
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def watch_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, watch_send)
        except BodyTooLarge:
            if started:
                raise
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        error = BodyTooLarge(self.max_bytes)
        body = json.dumps({"detail": [{"loc": ["body"], "msg": error.detail, "type": "body_too_large"}]}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
