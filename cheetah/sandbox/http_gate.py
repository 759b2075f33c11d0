"""`HttpGate`: the env server's door, a pure ASGI middleware outside the FastAPI app.

It sees every request before FastAPI reads or parses anything, and in this order:

1. **Bearer token**, compared in constant time (``hmac.compare_digest``). Every route
   but the open ones (``GET /health``) needs it; a request without it is answered 401
   (``{"detail": ...}``, ``WWW-Authenticate: Bearer``) without a byte of its body read.
2. **Body size**, for every route and transfer encoding. A ``Content-Length`` over the
   route's cap is answered 413 at once; a body without one (chunked) is counted as it
   arrives, and the message that takes it over the cap raises ``HTTPException(413)``
   from ``receive``, which FastAPI answers as a 413 (it re-raises an ``HTTPException``
   met while reading a body; any other exception there would become a 400). The gate
   answers that 413 itself if it escapes the app before a response started.

What a refused client still sends is drained and dropped by the HTTP server (uvicorn
discards body data once a response is complete; it never buffers more than 64 KiB of
a body the app has not asked for), and the connection stays open so the client can
read its answer instead of a reset. Websocket connections are closed unopened (the
server has no websocket routes). Left out: rate limits and slow-client timeouts
(uvicorn's keep-alive timeout and the process's own limits are what bound those).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Collection, MutableMapping, Sequence
from typing import Any

from fastapi import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNAUTHORIZED = "missing or wrong bearer token"


class HttpGate:
    """Token first, then a body cap; ``route_caps`` are ``(method, path prefix, cap)``
    that replace ``max_body_bytes`` for the routes they match (the first match wins)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        max_body_bytes: int,
        route_caps: Sequence[tuple[str, str, int]] = (),
        open_routes: Collection[tuple[str, str]] = (("GET", "/health"),),
    ) -> None:
        if len(token) < 16:
            raise ValueError("the bearer token must have at least 16 characters")
        self.app = app
        self._expected = b"bearer " + token.encode()
        self.max_body_bytes = max_body_bytes
        self.route_caps = list(route_caps)
        self.open_routes = set(open_routes)

    def cap(self, method: str, path: str) -> int:
        for m, prefix, cap in self.route_caps:
            if method == m and path.startswith(prefix):
                return cap
        return self.max_body_bytes

    def authorized(self, scope: Scope) -> bool:
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, credentials = given.partition(b" ")
        candidate = scheme.lower() + b" " + credentials.strip()
        return hmac.compare_digest(candidate, self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the server has no websocket routes
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if (method, path) not in self.open_routes and not self.authorized(scope):
            await _answer(send, 401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])
            return
        cap = self.cap(method, path)
        length = _content_length(scope)
        if length == -1:
            await _answer(send, 400, "Content-Length is not a number")
            return
        if length is not None and length > cap:
            detail = f"request body of {length} bytes is over the limit of {cap} bytes"
            await _answer(send, 413, detail)
            return

        received = 0
        started = False

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    raise HTTPException(413, f"request body is over the limit of {cap} bytes")
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, capped_receive, watched_send)
        except HTTPException as e:
            if started:
                raise
            await _answer(send, e.status_code, str(e.detail))


def _content_length(scope: Scope) -> int | None:
    """The declared body size, None when there is none, -1 when it is not a number."""
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                n = int(value)
            except ValueError:
                return -1
            return n if n >= 0 else -1
    return None


async def _answer(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
