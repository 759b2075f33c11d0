"""`cheetah dashboard`: a web UI over training runs, the env fleet and background agent jobs.

One FastAPI app: a JSON API under ``/api`` and one static page (``static/``, plain
JavaScript and SVG, nothing fetched from the internet). Views:

- **Runs**: reward / pass-rate / clean-call curves per step, the rollout timeline
  (one bar per rollout from start to finish, lanes = rollouts in flight, colour =
  reward), and every trajectory (messages, tool calls, grade).
- **Fleet**: each env server's health and ``/stats`` (sessions, capacity, load).
- **Jobs**: start ``cheetah agent`` in the background on an isolated copy of a repo
  under an operator's snapshot root, and follow its output, diff and trajectory.

The app sits inside ``HttpGate`` (``cheetah.core.http_gate``), which sees every request
first: the Host header must be a loopback name when the dashboard binds loopback (421
otherwise: a DNS-rebinding page sends its own name); with a token, every route but the
page itself (``GET /`` and the files of ``static/``, listed one by one since the gate
matches exact paths) wants ``Authorization: Bearer TOKEN`` (401), and the page takes the
token from ``#token=...`` in its URL; without a token, ``POST /api/jobs...`` is refused
with 403 (jobs run code) and the read-only views stay open to this machine; a body over
``dashboard_max_body_bytes`` is refused with 413 before it is read. What a job may name
is checked by ``jobs.JobRules`` (400 naming the rule, 403 when no snapshot root is
configured). Ids outside SQLite's integer range are 404, never a 500.

Deliberately left out: live push (the page polls every few seconds), user accounts (one
token is one operator), TLS (put a proxy in front).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at run time.

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from cheetah.core.http_gate import HttpGate, loopback_hosts
from cheetah.dashboard import runs as run_views
from cheetah.dashboard.jobs import JobError, JobManager, JobRules, JobsDisabled
from cheetah.limits import ServerLimits

STATIC = Path(__file__).parent / "static"
MAX_ROLLOUTS = 5000  # rollouts one timeline request may return
PAGE_HEADERS = {  # the page loads only its own files and is never framed
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


class JobRequest(BaseModel):
    query: str
    repo: str = Field(description="a directory at or under one of the --snapshot-root dirs")
    model: str = Field(description="default, tiny, an http(s) URL, or a path under --model-root")
    max_turns: int = 20


def page_routes() -> set[tuple[str, str]]:
    """The routes open without a token: the page and each file it loads (no data)."""
    files = {("GET", f"/static/{p.name}") for p in STATIC.iterdir() if p.is_file()}
    return {("GET", "/"), *files}


def create_app(
    runs_dir: Path,
    jobs_dir: Path,
    env_urls: list[str] | None = None,
    env_token: str | None = None,
    token: str | None = None,
    max_jobs: int = 2,
    *,
    snapshot_roots: Sequence[Path] = (),
    model_roots: Sequence[Path] = (),
    limits: ServerLimits | None = None,
    allowed_hosts: Collection[str] | None = loopback_hosts("127.0.0.1"),
) -> HttpGate:
    """The dashboard as an ASGI app: the FastAPI routes (``.app``) inside ``HttpGate``.

    ``snapshot_roots`` and ``model_roots`` must be resolved directories (``jobs.resolve_roots``);
    ``allowed_hosts`` None answers any Host header (for a server the token guards)."""
    limits = limits or ServerLimits()
    rules = JobRules(tuple(snapshot_roots), tuple(model_roots), limits.dashboard_max_query_chars)
    enabled = token is not None and bool(snapshot_roots)  # jobs_state says the same
    jobs = JobManager(jobs_dir, rules, max_running=max_jobs, enabled=enabled)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await jobs.close()

    app = FastAPI(
        title="cheetah dashboard",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.jobs = jobs
    _run_routes(app, runs_dir)
    _fleet_route(app, env_urls or [], env_token)
    _job_routes(app, jobs)

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return HttpGate(
        app,
        token=token,
        max_body_bytes=limits.dashboard_max_body_bytes,
        open_routes=page_routes(),
        needs_token=[("POST", "/api/jobs")],
        allowed_hosts=allowed_hosts,
    )


def _run_routes(app: FastAPI, runs_dir: Path) -> None:
    def run_call(fn, *args):
        try:
            return fn(runs_dir, *args)
        except run_views.RunNotFound as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/api/runs")
    async def list_runs() -> list[dict]:
        return run_views.list_runs(runs_dir)

    @app.get("/api/runs/{name}")
    async def run_summary(name: str) -> dict:
        return run_call(run_views.summary, name)

    @app.get("/api/runs/{name}/metrics")
    async def run_metrics(name: str) -> dict:
        return run_call(run_views.metrics, name)

    @app.get("/api/runs/{name}/rollouts")
    async def run_rollouts(name: str, limit: int = 500) -> list[dict]:
        return run_call(run_views.rollouts, name, max(1, min(limit, MAX_ROLLOUTS)))

    @app.get("/api/runs/{name}/rollouts/{rollout_id}")
    async def run_trajectory(name: str, rollout_id: int) -> dict:
        return run_call(run_views.trajectory, name, rollout_id)


def _fleet_route(app: FastAPI, env_urls: list[str], env_token: str | None) -> None:
    @app.get("/api/fleet")
    async def fleet() -> list[dict]:
        from cheetah.sandbox.client import EnvClient
        from cheetah.sandbox.protocol import EnvError

        out = []
        for url in env_urls:
            client = EnvClient(url, env_token or "", timeout_s=5.0)
            try:
                stats = (await client.stats()).model_dump()
                out.append({"url": url, "healthy": True, "stats": stats, "error": None})
            except EnvError as e:
                out.append({"url": url, "healthy": False, "stats": None, "error": str(e)})
            finally:
                await client.aclose()
        return out


def _job_routes(app: FastAPI, jobs: JobManager) -> None:
    @app.get("/api/jobs")
    async def list_jobs() -> list[dict]:
        return [j.to_dict() for j in jobs.list()]

    @app.post("/api/jobs", status_code=201)
    async def start_job(req: JobRequest) -> dict:
        try:
            job = await jobs.start(req.query, req.repo, req.model, req.max_turns)
        except JobsDisabled as e:
            raise HTTPException(403, str(e)) from None
        except JobError as e:
            raise HTTPException(400, str(e)) from None
        return job.to_dict()

    @app.get("/api/jobs/{job_id}")
    async def job_detail(job_id: int) -> dict:
        detail = jobs.detail(job_id)
        if detail is None:
            raise HTTPException(404, f"no job {job_id}")
        return detail

    @app.post("/api/jobs/{job_id}/cancel")
    async def cancel_job(job_id: int) -> dict:
        if jobs.get(job_id) is None:
            raise HTTPException(404, f"no job {job_id}")
        if not await jobs.cancel(job_id):
            raise HTTPException(409, f"job {job_id} is not running")
        return {"cancelled": job_id}


def serve(
    host: str,
    port: int,
    runs_dir: Path,
    jobs_dir: Path,
    env_urls: list[str],
    env_token: str | None,
    token: str | None,
    *,
    snapshot_roots: Sequence[Path] = (),
    model_roots: Sequence[Path] = (),
    limits: ServerLimits | None = None,
) -> None:
    """Serve the dashboard; the caller has checked the bind (``check_bind``) and the roots."""
    import uvicorn

    app = create_app(
        runs_dir,
        jobs_dir,
        env_urls,
        env_token,
        token,
        snapshot_roots=snapshot_roots,
        model_roots=model_roots,
        limits=limits,
        allowed_hosts=loopback_hosts(host),
    )
    suffix = f"/#token={token}" if token else "/"
    name = f"[{host}]" if ":" in host else host
    runs = run_views.describe(runs_dir)
    print(f"cheetah dashboard on http://{name}:{port}{suffix}  ({runs})", flush=True)
    print(f"  jobs: {jobs_state(token, snapshot_roots)}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def jobs_state(token: str | None, snapshot_roots: Sequence[Path]) -> str:
    """One line for the operator: whether jobs can run, and on what."""
    if token is None:
        return "off (they need --token-file)"
    if not snapshot_roots:
        return "off (they need --snapshot-root)"
    return "on, for repos under " + ", ".join(str(r) for r in snapshot_roots)
