"""`cheetah env serve`: a `LocalEnv` over HTTP (FastAPI + uvicorn), bearer token on all but /health.

Routes: ``/health``; ``/stats``; ``/sessions`` (create) and, per session,
``tools``, ``diff``, ``reset``, ``fork``, ``files`` (GET/PUT), ``exec``,
``stop`` and DELETE; ``/snapshots/{sha256}`` (HEAD/PUT a tarball). No ``/docs``,
``/redoc`` or ``/openapi.json``.

The HTTP layer refuses before it reads: the app is wrapped in ``core.http_gate.HttpGate``,
which checks the Host header (a loopback server answers loopback names only), then the
bearer token (401 without reading the body), and caps every request body whatever its
transfer encoding (413 on a ``Content-Length`` over the cap, or as soon as a chunked body
passes it): ``env_max_body_bytes`` for the JSON routes, ``env_max_upload_bytes`` for
``PUT /snapshots/{sha256}`` (``cheetah.limits.ServerLimits``, from ``--limits FILE`` or
``CHEETAH_ENV_MAX_*``). Routes keep their own token dependency as a second check. A
snapshot upload is streamed to a temporary file while hashed (never whole in memory),
checked against its sha256 and renamed into place; the snapshot store unpacks it when a
session names it (capped in bytes, members and depth), keeps all it holds under
``snapshot_store_bytes`` and never copies a host path that is not under a
``--snapshot-root``. Left out: rate limits, slow-client timeouts beyond uvicorn's, and
TLS (put the server on a private network or behind a proxy).

Idle sessions are reaped in the background; at capacity, creating a session answers
429 with ``Retry-After``. Errors answer with ``{"detail": "..."}`` and the status
``EnvError`` carries. On SIGTERM the server stops taking connections, lets running
requests finish for ``shutdown_grace_s``, then kills every command still running (their
requests answer at once), closes every session (processes killed, layers unmounted) and
unmounts its runtime mounts.
"""

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import ClientDisconnect

from cheetah.config import ConfigError
from cheetah.core.http_gate import UNAUTHORIZED, HttpGate, loopback_hosts, read_token
from cheetah.limits import ServerLimits
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv
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
from cheetah.tools.base import CodeSearch


def create_app(
    env: LocalEnv,
    token: str,
    reap_interval_s: float = 30.0,
    *,
    allowed_hosts: frozenset[str] | None = None,
) -> HttpGate:
    """The server as an ASGI app: the FastAPI routes inside ``HttpGate`` (``.app``); its
    body caps are ``env.server_limits``'."""
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
            await env.aclose()

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
        return await env.create_session(req.snapshot, req.session_id, req.refresh, req.env)

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
            await env.put_upload_stream(sha, request.stream())
        except ClientDisconnect:
            raise EnvError("the client went away before the snapshot was complete", 400) from None

    @app.delete("/sessions/{sid}", dependencies=guarded, status_code=204)
    async def close(sid: str) -> None:
        await env.close(sid)

    limits = env.server_limits
    return HttpGate(
        app,
        token=token,
        max_body_bytes=limits.env_max_body_bytes,
        route_caps=[("PUT", "/snapshots/", limits.env_max_upload_bytes)],
        allowed_hosts=allowed_hosts,
    )


class GracefulServer(uvicorn.Server):
    """uvicorn's server with a bound on its stop: ``grace_s`` after SIGTERM it calls
    ``on_grace_over`` (kill what still runs, so those requests answer), and uvicorn
    cancels whatever is left 5 s later; then the app's shutdown closes every session."""

    def __init__(self, app, host: str, port: int, grace_s: float, on_grace_over) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=grace_s + 5
        )
        super().__init__(config)
        self.grace_s, self.on_grace_over = grace_s, on_grace_over

    async def shutdown(self, sockets=None) -> None:
        killer = asyncio.get_running_loop().call_later(self.grace_s, self.on_grace_over)
        try:
            await super().shutdown(sockets)
        finally:
            killer.cancel()


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
    *,
    snapshot_roots: list[Path] = (),
    limits_file: Path | None = None,
) -> None:
    """Run the server until SIGTERM; ``ConfigError`` for a bad config, limits or root."""
    token = read_token(token_file)
    limits = ServerLimits.load(limits_file)  # a bad value stops the server now
    for root in snapshot_roots:
        if not Path(root).is_dir():
            raise ConfigError(f"--snapshot-root {str(root)!r} is not a directory")
    cfg = SandboxConfig.from_toml(config) if config else SandboxConfig()
    env = LocalEnv(
        backend,  # type: ignore[arg-type]
        config=cfg,
        capacity=capacity,
        idle_timeout_s=idle_timeout_s,
        code_search=code_search,
        server_limits=limits,
        snapshot_roots=list(snapshot_roots),
    )
    roots = ", ".join(str(r) for r in env.snapshot_roots or []) or "none (uploads only)"
    print(
        f"cheetah env server on http://{host}:{port}  isolation: {env.isolation}  "
        f"snapshot roots: {roots}",
        flush=True,
    )
    app = create_app(env, token, reap_interval_s, allowed_hosts=loopback_hosts(host))
    GracefulServer(app, host, port, limits.shutdown_grace_s, env.kill_all).run()
