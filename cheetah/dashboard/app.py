"""`cheetah dashboard`: a web UI over training runs, the env fleet and background agent jobs.

One FastAPI app: a JSON API under ``/api`` and one static page (``static/``, plain
JavaScript and SVG, nothing fetched from the internet). Views:

- **Runs**: reward / pass-rate / clean-call curves per step, the rollout timeline
  (one bar per rollout from start to finish, lanes = rollouts in flight, colour =
  reward), and every trajectory (messages, tool calls, grade).
- **Fleet**: each env server's health and ``/stats`` (sessions, capacity, load).
- **Jobs**: start ``cheetah agent`` on a repo in the background (isolated copy) and
  follow its output, diff and trajectory.

With ``token`` set, every ``/api`` route wants ``Authorization: Bearer TOKEN`` (the page
takes it from ``#token=...`` in its URL); jobs run code, so bind to localhost or use
a token. Deliberately left out: live push (the page polls every few seconds), user
accounts.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at run time, and the nested ``auth`` dependency must stay resolvable.

import contextlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from cheetah.dashboard import runs as run_views
from cheetah.dashboard.jobs import JobError, JobManager

STATIC = Path(__file__).parent / "static"


class JobRequest(BaseModel):
    query: str
    repo: str
    model: str = Field(description="as for cheetah agent --model")
    max_turns: int = 20


def create_app(
    runs_dir: Path,
    jobs_dir: Path,
    env_urls: list[str] | None = None,
    env_token: str | None = None,
    token: str | None = None,
    max_jobs: int = 2,
) -> FastAPI:
    jobs = JobManager(jobs_dir, max_running=max_jobs)
    bearer = HTTPBearer(auto_error=False)

    def auth(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if token is None:
            return
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong bearer token")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await jobs.close()

    app = FastAPI(title="cheetah dashboard", lifespan=lifespan)
    app.state.jobs = jobs
    api = [Depends(auth)]

    def run_call(fn, *args):
        try:
            return fn(runs_dir, *args)
        except run_views.RunNotFound as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/api/runs", dependencies=api)
    async def list_runs() -> list[dict]:
        return run_views.list_runs(runs_dir)

    @app.get("/api/runs/{name}", dependencies=api)
    async def run_summary(name: str) -> dict:
        return run_call(run_views.summary, name)

    @app.get("/api/runs/{name}/metrics", dependencies=api)
    async def run_metrics(name: str) -> dict:
        return run_call(run_views.metrics, name)

    @app.get("/api/runs/{name}/rollouts", dependencies=api)
    async def run_rollouts(name: str, limit: int = 500) -> list[dict]:
        return run_call(run_views.rollouts, name, max(1, min(limit, 5000)))

    @app.get("/api/runs/{name}/rollouts/{rollout_id}", dependencies=api)
    async def run_trajectory(name: str, rollout_id: int) -> dict:
        return run_call(run_views.trajectory, name, rollout_id)

    @app.get("/api/fleet", dependencies=api)
    async def fleet() -> list[dict]:
        from cheetah.sandbox.client import EnvClient
        from cheetah.sandbox.protocol import EnvError

        out = []
        for url in env_urls or []:
            client = EnvClient(url, env_token or "", timeout_s=5.0)
            try:
                stats = (await client.stats()).model_dump()
                out.append({"url": url, "healthy": True, "stats": stats, "error": None})
            except EnvError as e:
                out.append({"url": url, "healthy": False, "stats": None, "error": str(e)})
            finally:
                await client.aclose()
        return out

    @app.get("/api/jobs", dependencies=api)
    async def list_jobs() -> list[dict]:
        return [j.to_dict() for j in jobs.list()]

    @app.post("/api/jobs", dependencies=api, status_code=201)
    async def start_job(req: JobRequest) -> dict:
        try:
            job = await jobs.start(req.query, req.repo, req.model, req.max_turns)
        except JobError as e:
            raise HTTPException(400, str(e)) from None
        return job.to_dict()

    @app.get("/api/jobs/{job_id}", dependencies=api)
    async def job_detail(job_id: int) -> dict:
        detail = jobs.detail(job_id)
        if detail is None:
            raise HTTPException(404, f"no job {job_id}")
        return detail

    @app.post("/api/jobs/{job_id}/cancel", dependencies=api)
    async def cancel_job(job_id: int) -> dict:
        if not await jobs.cancel(job_id):
            raise HTTPException(409, f"job {job_id} is not running")
        return {"cancelled": job_id}

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def serve(
    host: str,
    port: int,
    runs_dir: Path,
    jobs_dir: Path,
    env_urls: list[str],
    env_token: str | None,
    token: str | None,
) -> None:
    import uvicorn

    app = create_app(runs_dir, jobs_dir, env_urls, env_token, token)
    suffix = f"/#token={token}" if token else "/"
    print(f"cheetah dashboard on http://{host}:{port}{suffix}  (runs: {runs_dir})", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
