"""`HttpGate`: the one door of every cheetah server, a pure ASGI middleware outside the app.

The env server, ``cheetah serve`` (completions, weights, embeddings, re-rank) and the
dashboard all sit behind it. It sees every request before the app reads or parses
anything, and in this order:

1. **Host header**, when ``allowed_hosts`` is given (servers bound to loopback): the name
   the client asked for must be one of them, else 421. A web page that rebinds its own
   DNS name to 127.0.0.1 sends its own name here, so it never reaches a loopback server.
2. **Bearer token**, compared in constant time (``hmac.compare_digest``). With a token,
   every route but ``open_routes`` needs it; without one (a loopback server started
   without ``--token-file``), the ``needs_token`` routes are refused with 403 and the rest
   are open. A request that fails is answered 401 (``WWW-Authenticate: Bearer``) without
   a byte of its body read.
3. **Body size**, for every route and transfer encoding. A ``Content-Length`` over the
   route's cap is answered 413 at once; a body without one (chunked) is counted as it
   arrives, and the message that takes it over the cap raises ``HTTPException(413)``
   from ``receive``, which FastAPI answers as a 413 (it re-raises an ``HTTPException``
   met while reading a body). The gate answers that 413 itself if it escapes the app
   before a response started.

What a refused client still sends is drained and dropped by the HTTP server (uvicorn
discards body data once a response is complete; it never buffers more than 64 KiB of
a body the app has not asked for), and the connection stays open so the client can
read its answer instead of a reset. A websocket connection passes only to one of
``websocket_paths`` (the OpenEnv server's ``/ws``), after the Host and token checks (a
handshake is a ``GET``; its messages are bounded by the HTTP server's ``ws_max_size``); any
other is closed unopened. Errors are ``{"detail": ...}`` unless the server passes
its own ``error_body`` (the OpenAI-compatible server answers ``{"error": {...}}``).
Left out: rate limits and slow-client timeouts (uvicorn's keep-alive timeout and the
process's own limits bound those), TLS (put a proxy in front).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import stat
from collections.abc import Awaitable, Callable, Collection, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorBody = Callable[[int, str], dict[str, Any]]

UNAUTHORIZED = "missing or wrong bearer token"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class SettingError(ValueError):
    """A server or client setting that cannot work (token file, bind address); the message
    names it. Command-line verbs print it and exit 2."""


def detail_body(status: int, message: str) -> dict[str, Any]:
    return {"detail": message}


def read_token(path: str | Path) -> str:
    """The bearer token held in the file ``path`` (stripped), or ``SettingError`` saying why not."""
    try:
        token = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise SettingError(f"cannot read token file {str(path)!r}: {why}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise SettingError(
            f"token file {str(path)!r} must hold a token of at least {MIN_TOKEN_CHARS} characters"
        )
    return token


def write_token(path: str | Path, token: str) -> Path:
    """Write ``token`` to a new file ``path`` (mode 0600) for a server that made it, never
    through a link: the one writer of token files.

    A regular file already at ``path`` (a stale token of an earlier run) is unlinked first,
    which removes that name only; a link or anything else there is a ``SettingError``, and
    nothing is written. The file is then created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so
    whatever is planted there between the unlink and the create is refused too, not
    followed or reused. Left out: the folder itself (its owner decides who may write in it).
    """
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise SettingError(
                f"token file {str(path)!r} exists and is not a regular file (a link?); "
                "nothing written: remove it or choose another path"
            )
        path.unlink()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise SettingError(f"cannot create token file {str(path)!r}: {e.strerror}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return path


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def loopback_hosts(host: str) -> frozenset[str] | None:
    """The Host names a server bound to ``host`` answers: the loopback names when it binds
    loopback, None (any: the token guards it) when it binds beyond."""
    return LOOPBACK_NAMES | {host.strip("[]").lower()} if is_loopback(host) else None


def check_bind(server: str, host: str, token: str | None) -> None:
    """``SettingError`` when ``server`` would listen beyond loopback without a token."""
    if token is None and not is_loopback(host):
        raise SettingError(
            f"{server}: --host {host} accepts connections from other machines; "
            "give --token-file (a file holding a bearer token of at least "
            f"{MIN_TOKEN_CHARS} characters) or bind to 127.0.0.1"
        )


def _host_name(scope: Scope) -> str:
    raw = next((v for k, v in scope.get("headers", ()) if k == b"host"), b"")
    text = raw.decode("latin-1").strip().lower()
    if text.startswith("["):  # [::1]:8000
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


class HttpGate:
    """Host, then token, then a body cap; ``route_caps`` are ``(method, path prefix, cap)``
    that replace ``max_body_bytes`` for the routes they match (the first match wins)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        route_caps: Sequence[tuple[str, str, int]] = (),
        open_routes: Collection[tuple[str, str]] = (("GET", "/health"),),
        needs_token: Sequence[tuple[str, str]] = (),
        allowed_hosts: Collection[str] | None = None,
        error_body: ErrorBody = detail_body,
        websocket_paths: Collection[str] = (),
    ) -> None:
        if token is not None and len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the bearer token must have at least {MIN_TOKEN_CHARS} characters")
        self.app = app
        self.token = token
        self._expected = b"bearer " + token.encode() if token is not None else None
        self.max_body_bytes = max_body_bytes
        self.route_caps = list(route_caps)
        self.open_routes = set(open_routes)
        self.needs_token = list(needs_token)
        self.allowed_hosts = frozenset(allowed_hosts) if allowed_hosts is not None else None
        self.error_body = error_body
        self.websocket_paths = frozenset(websocket_paths)

    def cap(self, method: str, path: str) -> int:
        for m, prefix, cap in self.route_caps:
            if method == m and path.startswith(prefix):
                return cap
        return self.max_body_bytes

    def authorized(self, scope: Scope) -> bool:
        if self._expected is None:
            return True
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, credentials = given.partition(b" ")
        candidate = scheme.lower() + b" " + credentials.strip()
        return hmac.compare_digest(candidate, self._expected)

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        method, path = scope.get("method", "GET"), scope["path"]  # a websocket: its GET
        if self.allowed_hosts is not None and _host_name(scope) not in self.allowed_hosts:
            return 421, f"this server does not answer for host {_host_name(scope)!r}", []
        if self.token is None:
            if any(method == m and path.startswith(p) for m, p in self.needs_token):
                why = f"{method} {path} needs a bearer token: start the server with --token-file"
                return 403, why, []
            return None
        if (method, path) not in self.open_routes and not self.authorized(scope):
            return 401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            if scope["path"] in self.websocket_paths and self._refusal(scope) is None:
                await self.app(scope, receive, send)
                return
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        if refusal := self._refusal(scope):
            status, detail, headers = refusal
            await self._answer(send, status, detail, headers)
            return
        cap = self.cap(scope["method"], scope["path"])
        length = _content_length(scope)
        if length == -1:
            await self._answer(send, 400, "Content-Length is not a number")
            return
        if length is not None and length > cap:
            detail = f"request body of {length} bytes is over the limit of {cap} bytes"
            await self._answer(send, 413, detail)
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
            await self._answer(send, e.status_code, str(e.detail))

    async def _answer(
        self, send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()
    ) -> None:
        body = json.dumps(self.error_body(status, detail)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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
