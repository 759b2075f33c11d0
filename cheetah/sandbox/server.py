"""`cheetah env serve`: a `LocalEnv` over HTTP (FastAPI + uvicorn), bearer token on all but /health.

Routes: ``/health``; ``/stats``; ``/sessions`` (create) and, per session,
``tools``, ``diff``, ``reset``, ``fork``, ``grade``, ``files`` (GET/PUT), ``exec``,
``stop`` and DELETE; ``/snapshots/{sha256}`` (HEAD/PUT a tarball).

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

from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import MAX_UPLOAD_BYTES, LocalEnv
from cheetah.sandbox.protocol import (
    CreateSessionRequest,
    DiffResponse,
    EnvError,
    ExecRequest,
    ExecResponse,
    FilesResponse,
    GradeRequest,
    GradeResponse,
    Health,
    ResultModel,
    RunToolsRequest,
    RunToolsResponse,
    SessionInfo,
    Stats,
    WriteFilesRequest,
)


def read_token(path: str | Path) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise SystemExit(f"cannot read token file {str(path)!r}: {e.strerror}") from None
    if len(token) < 16:
        raise SystemExit(f"token file {str(path)!r} must hold a token of at least 16 characters")
    return token


def create_app(env: LocalEnv, token: str, reap_interval_s: float = 30.0) -> FastAPI:
    bearer = HTTPBearer(auto_error=False)

    def auth(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise EnvError("missing or wrong bearer token", 401)

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

    app = FastAPI(title="cheetah env server", lifespan=lifespan)

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

    @app.post("/sessions/{sid}/grade", dependencies=guarded)
    async def grade(sid: str, req: GradeRequest) -> GradeResponse:
        return await env.grade(sid, req)

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
        size = int(request.headers.get("content-length") or 0)
        if size > MAX_UPLOAD_BYTES:
            raise EnvError(f"snapshot of {size} bytes is over {MAX_UPLOAD_BYTES}", 413)
        data = await request.body()
        await asyncio.to_thread(env.put_upload, sha, data)

    @app.delete("/sessions/{sid}", dependencies=guarded, status_code=204)
    async def close(sid: str) -> None:
        await env.close(sid)

    return app


def serve(
    host: str,
    port: int,
    token_file: str,
    backend: str,
    capacity: int,
    idle_timeout_s: float,
    config: Path | None = None,
    reap_interval_s: float = 30.0,
) -> None:
    import uvicorn

    token = read_token(token_file)
    cfg = SandboxConfig.from_toml(config) if config else SandboxConfig()
    env = LocalEnv(backend, config=cfg, capacity=capacity, idle_timeout_s=idle_timeout_s)  # type: ignore[arg-type]
    print(f"cheetah env server on http://{host}:{port}  isolation: {env.isolation}", flush=True)
    uvicorn.run(create_app(env, token, reap_interval_s), host=host, port=port, log_level="warning")
