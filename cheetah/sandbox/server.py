"""`cheetah env serve`: a `LocalEnv` over HTTP (FastAPI + uvicorn), bearer token on all but /health.

Routes: ``/health``; ``/stats``; ``/sessions`` (create) and, per session,
``tools``, ``diff``, ``reset``, ``fork``, ``files`` (GET/PUT), ``exec``,
``stop`` and DELETE; ``/snapshots/{sha256}`` (HEAD/PUT a tarball). No ``/docs``,
``/redoc`` or ``/openapi.json``.

The HTTP layer refuses before it reads: the app is wrapped in ``HttpGate``
(``sandbox/http_gate.py``), which checks the bearer token before anything else (401
without reading the body) and caps every request body whatever its transfer encoding
(413 on a ``Content-Length`` over the cap, or as soon as a chunked body passes it):
``MAX_BODY_BYTES`` (64 MiB) for the JSON routes, ``MAX_UPLOAD_BYTES`` (1 GiB) for
``PUT /snapshots/{sha256}``. At start, ``CHEETAH_ENV_MAX_BODY_BYTES`` sets the first
and ``CHEETAH_ENV_MAX_UPLOAD_BYTES`` lowers the second. Routes keep their own token
dependency as a second check. A snapshot upload is streamed to a temporary file while
hashed (never whole in memory), checked against its sha256 and renamed into place;
its extraction, when a session names it, is capped in size and members
(``sandbox/snapshot.py``). Left out: rate limits, slow-client timeouts beyond
uvicorn's, and TLS (put the server on a private network or behind a proxy).

Idle sessions are reaped in the background; at capacity, creating a session answers
429 with ``Retry-After``. Errors answer with ``{"detail": "..."}`` and the status
``EnvError`` carries. On shutdown every session is closed (processes killed,
layers unmounted).
"""

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import ClientDisconnect

from cheetah.core.http_gate import UNAUTHORIZED, HttpGate, read_token
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import MAX_UPLOAD_BYTES, LocalEnv
from cheetah.sandbox.protocol import (
    CreateSessionRequest,
    DiffResponse,
    EnvError,
    ExecRequest,
    ExecResponse,
    FilesResponse,
    Health,
    ResultModel,
    RunToolsRequest,
    RunToolsResponse,
    SessionInfo,
    Stats,
    WriteFilesRequest,
)
from cheetah.sandbox.snapshot import SnapshotError, env_limit, extract_limits
from cheetah.tools.base import CodeSearch

MAX_BODY_BYTES = 64 << 20  # a JSON request body (tool calls, files to write, grading)


def create_app(
    env: LocalEnv,
    token: str,
    reap_interval_s: float = 30.0,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_upload_bytes: int = MAX_UPLOAD_BYTES,
) -> HttpGate:
    """The server as an ASGI app: the FastAPI routes inside ``HttpGate`` (``.app``)."""
    bearer = HTTPBearer(auto_error=False)

    def auth(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise EnvError(UNAUTHORIZED, 401)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(reap_interval_s)
                await env.reap_idle()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await env.close_all()

    app = FastAPI(
        title="cheetah env server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(EnvError)
    async def env_error(request: Request, exc: EnvError) -> JSONResponse:
        headers = {"Retry-After": f"{exc.retry_after:g}"} if exc.retry_after is not None else None
        if exc.status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=headers)

    @app.get("/health")
    async def health() -> Health:
        return Health(ok=True, isolation=env.isolation)

    guarded = [Depends(auth)]

    @app.get("/stats", dependencies=guarded)
    async def stats() -> Stats:
        return await env.stats()

    @app.post("/sessions", dependencies=guarded, status_code=201)
    async def create(req: CreateSessionRequest) -> SessionInfo:
        return await env.create_session(req.snapshot, req.session_id, req.refresh)

    @app.post("/sessions/{sid}/tools", dependencies=guarded)
    async def run_tools(sid: str, req: RunToolsRequest) -> RunToolsResponse:
        results = await env.run_tools(sid, [c.to_call() for c in req.calls])
        return RunToolsResponse(results=[ResultModel.of(r) for r in results])

    @app.get("/sessions/{sid}/diff", dependencies=guarded)
    async def diff(sid: str) -> DiffResponse:
        return await env.diff(sid)

    @app.post("/sessions/{sid}/reset", dependencies=guarded, status_code=204)
    async def reset(sid: str) -> None:
        await env.reset(sid)

    @app.post("/sessions/{sid}/fork", dependencies=guarded, status_code=201)
    async def fork(sid: str) -> SessionInfo:
        return await env.fork(sid)

    @app.get("/sessions/{sid}/files", dependencies=guarded)
    async def read_files(sid: str) -> FilesResponse:
        return await env.read_files(sid)

    @app.put("/sessions/{sid}/files", dependencies=guarded, status_code=204)
    async def write_files(sid: str, req: WriteFilesRequest) -> None:
        await env.write_files(sid, req)

    @app.post("/sessions/{sid}/exec", dependencies=guarded)
    async def exec_(sid: str, req: ExecRequest) -> ExecResponse:
        return await env.exec(sid, req)

    @app.post("/sessions/{sid}/stop", dependencies=guarded, status_code=204)
    async def stop(sid: str) -> None:
        await env.stop(sid)

    @app.head("/snapshots/{sha}", dependencies=guarded)
    async def has_snapshot(sha: str) -> Response:
        return Response(status_code=200 if env.has_upload(sha) else 404)

    @app.put("/snapshots/{sha}", dependencies=guarded, status_code=201)
    async def put_snapshot(sha: str, request: Request) -> None:
        # The gate has refused a Content-Length over the cap and counts a chunked body.
        try:
            await env.put_upload_stream(sha, request.stream(), max_upload_bytes)
        except ClientDisconnect:
            raise EnvError("the client went away before the snapshot was complete", 400) from None

    @app.delete("/sessions/{sid}", dependencies=guarded, status_code=204)
    async def close(sid: str) -> None:
        await env.close(sid)

    return HttpGate(
        app,
        token=token,
        max_body_bytes=max_body_bytes,
        route_caps=[("PUT", "/snapshots/", max_upload_bytes)],
    )


def _size_setting(name: str, default: int) -> int:
    try:
        return env_limit(name, default)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def serve(
    host: str,
    port: int,
    token_file: str,
    backend: str,
    capacity: int,
    idle_timeout_s: float,
    config: Path | None = None,
    reap_interval_s: float = 30.0,
    code_search: CodeSearch | None = None,
) -> None:
    import uvicorn

    token = read_token(token_file)
    max_body = _size_setting("CHEETAH_ENV_MAX_BODY_BYTES", MAX_BODY_BYTES)
    max_upload = min(
        _size_setting("CHEETAH_ENV_MAX_UPLOAD_BYTES", MAX_UPLOAD_BYTES), MAX_UPLOAD_BYTES
    )
    try:
        extract_limits()  # a bad CHEETAH_SNAPSHOT_MAX_* stops the server now, not a session later
    except SnapshotError as e:
        raise SystemExit(str(e)) from None
    cfg = SandboxConfig.from_toml(config) if config else SandboxConfig()
    env = LocalEnv(
        backend,  # type: ignore[arg-type]
        config=cfg,
        capacity=capacity,
        idle_timeout_s=idle_timeout_s,
        code_search=code_search,
    )
    print(f"cheetah env server on http://{host}:{port}  isolation: {env.isolation}", flush=True)
    app = create_app(
        env, token, reap_interval_s, max_body_bytes=max_body, max_upload_bytes=max_upload
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
