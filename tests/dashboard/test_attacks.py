"""The dashboard as an attacker meets it: every request is authenticated and bounded, and a
job never copies a host path the client chose.

One test per finding: jobs without a token, requests without the token, a DNS-rebinding
page (its own Host name), repos outside the snapshot roots (a 0600 file stands for a
root-only one), ``..`` and symbolic links out of a root, queries and models that would
be read as options or name host paths, ids past SQLite's integer range, an over-long
query, a body over the cap, and a bind beyond loopback without a token. No job process
is started here (``JobManager._spawn`` is replaced where a request would get that far),
and nothing asserts a duration: timeouts only guard hangs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cheetah.cli import build_parser
from cheetah.core.http_gate import loopback_hosts
from cheetah.dashboard.jobs import (
    JobError,
    JobRules,
    JobsDisabled,
    agent_argv,
    check_model,
    resolve_repo,
)
from cheetah.limits import ServerLimits
from tests.dashboard.conftest import AUTH, TOKEN, dashboard_client

pytestmark = pytest.mark.timeout(120)

SECRET = "ROOT-ONLY-SECRET-7f3a9c"
HUGE = "99999999999999999999"  # past SQLite's int64


def api_routes(job_id: str = "1") -> list[tuple[str, str]]:
    return [
        ("GET", "/api/runs"),
        ("GET", "/api/runs/demo"),
        ("GET", "/api/runs/demo/metrics"),
        ("GET", "/api/runs/demo/rollouts"),
        ("GET", "/api/runs/demo/rollouts/1"),
        ("GET", "/api/fleet"),
        ("GET", "/api/jobs"),
        ("GET", f"/api/jobs/{job_id}"),
        ("POST", "/api/jobs"),
        ("POST", f"/api/jobs/{job_id}/cancel"),
    ]


@pytest.fixture
def outside(tmp_path):
    """A directory outside every root holding a file only its owner may read."""
    d = tmp_path / "outside"
    d.mkdir()
    secret = d / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return d


@pytest.fixture
def spawned(monkeypatch):
    """The argv of every job a request got as far as starting (no process is started)."""
    from cheetah.dashboard.jobs import JobManager

    argvs: list[list[str]] = []

    async def record(self, job_id: int, argv: list[str]) -> None:
        argvs.append(argv)
        self._finish(job_id, "failed", None)

    monkeypatch.setattr(JobManager, "_spawn", record)
    return argvs


def job(repo, query="look around", model="default", **extra) -> dict:
    return {"query": query, "repo": str(repo), "model": model, **extra}


def no_jobs(c, tmp_path) -> bool:
    """No job row and no job file: nothing got as far as a process."""
    jobs_dir = tmp_path / "jobs"
    files = (
        [p.name for p in jobs_dir.iterdir() if p.name.startswith("job-")]
        if jobs_dir.exists()
        else []
    )
    return c.app.app.state.jobs.list() == [] and files == []


# -- finding 1: jobs on any directory, from any local client or rebinding page -------------
def test_without_a_token_jobs_are_refused_and_nothing_starts(
    runs_dir, tmp_path, snapshot_root, spawned
):
    with dashboard_client(runs_dir, tmp_path, snapshot_roots=[snapshot_root]) as c:
        r = c.post("/api/jobs", json=job(snapshot_root / "sample"))
        assert r.status_code == 403 and "--token-file" in r.json()["detail"]
        assert c.post("/api/jobs/1/cancel").status_code == 403
        assert no_jobs(c, tmp_path) and spawned == []
        assert c.get("/api/runs").status_code == 200  # read-only views stay open on loopback


def test_with_a_token_every_api_route_needs_it(runs_dir, tmp_path, snapshot_root, spawned):
    with dashboard_client(runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root]) as c:
        wrong = [
            {},
            {"Authorization": "Bearer " + TOKEN[:-1]},
            {"Authorization": "Bearer " + TOKEN + "x"},
            {"Authorization": TOKEN},
            {"Authorization": "Basic " + TOKEN},
        ]
        for method, path in [*api_routes(), ("GET", "/docs"), ("GET", "/openapi.json")]:
            for headers in wrong:
                body = job(snapshot_root / "sample") if method == "POST" else None
                r = c.request(method, path, headers=headers, json=body)
                assert r.status_code == 401, (method, path, headers)
                assert r.headers["www-authenticate"] == "Bearer"
        assert no_jobs(c, tmp_path) and spawned == []
        for page in ("/", "/static/app.js", "/static/style.css"):
            assert c.get(page).status_code == 200
        assert c.get("/static/../jobs.py").status_code == 401


def test_a_rebinding_page_is_answered_421(runs_dir, tmp_path, snapshot_root, spawned):
    kw = {"token": TOKEN, "snapshot_roots": [snapshot_root]}
    with dashboard_client(runs_dir, tmp_path, allowed_hosts=loopback_hosts("127.0.0.1"), **kw) as c:
        evil = {"Host": "evil.example", **AUTH}
        for method, path in [("GET", "/"), ("GET", "/static/app.js"), *api_routes()]:
            body = job(snapshot_root / "sample") if method == "POST" else None
            r = c.request(method, path, headers=evil, json=body)
            assert r.status_code == 421, (method, path)
        for host in ("127.0.0.1:8800", "localhost", "[::1]:8800"):
            assert c.get("/api/runs", headers={"Host": host, **AUTH}).status_code == 200
        assert no_jobs(c, tmp_path) and spawned == []


def test_a_repo_outside_the_snapshot_roots_is_refused_and_its_secret_never_shows(
    runs_dir, tmp_path, snapshot_root, outside, spawned
):
    with dashboard_client(
        runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root], model_roots=[outside]
    ) as c:
        c.headers.update(AUTH)
        answers = []
        for repo in (outside, "/etc", "/", outside / "secret.txt", tmp_path):
            r = c.post("/api/jobs", json=job(repo))
            assert r.status_code == 400, repo
            assert str(snapshot_root) in r.json()["detail"]  # names the roots
            answers.append(r.text)
        # the model cannot read it either (a scripted policy would replay the file)
        r = c.post("/api/jobs", json=job(snapshot_root / "sample", model="/etc/passwd"))
        assert r.status_code == 400
        answers += [r.text, c.get("/api/jobs").text, c.get("/api/jobs/1").text]
        assert not any(SECRET in a for a in answers)
        assert no_jobs(c, tmp_path) and spawned == []


def test_with_no_snapshot_root_jobs_are_off(runs_dir, tmp_path, spawned):
    with dashboard_client(runs_dir, tmp_path, token=TOKEN) as c:
        r = c.post("/api/jobs", json=job("/etc"), headers=AUTH)
        assert r.status_code == 403 and "--snapshot-root" in r.json()["detail"]
        assert no_jobs(c, tmp_path) and spawned == []


def test_dotdot_and_links_out_of_a_root_are_refused(tmp_path, snapshot_root, outside):
    rules = JobRules((snapshot_root,), (), 20_000)
    (snapshot_root / "escape").symlink_to(outside)
    (snapshot_root / "sample" / "up").symlink_to("../..")
    (snapshot_root / "secret-link").symlink_to(outside / "secret.txt")
    (snapshot_root / "inside").symlink_to(snapshot_root / "sample")
    (snapshot_root / "a-file").write_text("x")
    refused = [
        f"{snapshot_root}/../outside",
        f"{snapshot_root}/sample/../../outside",
        f"{snapshot_root}/escape",
        f"{snapshot_root}/escape/",
        f"{snapshot_root}/sample/up",
        f"{snapshot_root}/sample/up/outside",
        f"{snapshot_root}/secret-link",
        f"{snapshot_root}/a-file",
        f"{snapshot_root}/missing",
        "repos/sample",  # relative: resolved against whatever the cwd is
        "sample",
        "",
        f"{snapshot_root}/sample\x00",
        "\ud800",
        "/" + "a" * 5000,
    ]
    for repo in refused:
        with pytest.raises(JobError):
            resolve_repo(repo, rules)
    # the job gets the resolved path, never the name the client gave
    assert resolve_repo(f"{snapshot_root}/inside", rules) == snapshot_root / "sample"
    assert resolve_repo(f"{snapshot_root}/sample/./", rules) == snapshot_root / "sample"
    with pytest.raises(JobsDisabled):
        resolve_repo(str(snapshot_root / "sample"), JobRules((), (), 20_000))


def test_a_job_runs_on_the_resolved_path(runs_dir, tmp_path, snapshot_root, spawned):
    (snapshot_root / "inside").symlink_to(snapshot_root / "sample")
    with dashboard_client(runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root]) as c:
        r = c.post("/api/jobs", json=job(f"{snapshot_root}/inside/"), headers=AUTH)
        assert r.status_code == 201 and r.json()["repo"] == str(snapshot_root / "sample")
    [argv] = spawned
    assert f"--repo={snapshot_root / 'sample'}" in argv


# -- finding 3: argv injection through the query and the model ---------------------------
@pytest.mark.parametrize(
    "query", ["--help", "--model scripted:/etc/passwd", "--repo=/", "-h", "--", "-- x"]
)
def test_a_query_that_looks_like_an_option_is_the_query(tmp_path, query):
    argv = agent_argv(query, tmp_path / "repo", "default", 5, tmp_path / "out.json")
    assert argv[-2:] == ["--", query]
    args = build_parser().parse_args(argv[3:])  # what `cheetah agent` reads
    assert args.query == query and args.model == "default" and args.max_turns == 5
    assert args.repo == tmp_path / "repo" and args.sandbox and args.out == tmp_path / "out.json"


def test_a_query_option_over_http_stays_the_query(runs_dir, tmp_path, snapshot_root, spawned):
    with dashboard_client(runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root]) as c:
        q = "--model scripted:/etc/passwd"
        r = c.post("/api/jobs", json=job(snapshot_root / "sample", query=q), headers=AUTH)
        assert r.status_code == 201 and r.json()["model"] == "default"
    [argv] = spawned
    assert argv[-2:] == ["--", q] and "--model=default" in argv


def test_a_model_that_names_a_host_path_is_refused(tmp_path, outside):
    models = tmp_path / "models"
    models.mkdir()
    (models / "steps.json").write_text("[]")
    (models / "leak.json").symlink_to(outside / "secret.txt")
    rules = JobRules((), (models.resolve(),), 20_000)
    refused = [
        "scripted:/etc/passwd",
        f"scripted:{outside}/secret.txt",
        f"scripted:{models}/leak.json",
        f"scripted:{models}/../outside/secret.txt",
        f"scripted:{models}/missing.json",
        f"scripted:{models}",  # a directory is no script
        "scripted:steps.json",
        "/etc",
        str(outside),
        "--help",
        "gpt-4",
        "~/models",
        "http://",
        "http://[::1",
        "http://host/v1\nx",
        "",
    ]
    for model in refused:
        with pytest.raises(JobError) as e:
            check_model(model, rules)
        assert SECRET not in str(e.value)
    for ok in ("default", "tiny", "http://127.0.0.1:8000/v1", "https://models.example/v1"):
        assert check_model(ok, rules) == ok
    script = f"scripted:{models.resolve()}/steps.json"
    assert check_model(f"scripted:{models}/./steps.json", rules) == script
    assert check_model(str(models), rules) == str(models.resolve())
    with pytest.raises(JobError, match="--model-root"):
        check_model(f"scripted:{models}/steps.json", JobRules((), (), 20_000))


# -- finding 2: ids past SQLite's range ----------------------------------------------------
def test_huge_and_negative_ids_are_404_not_500(runs_dir, tmp_path, snapshot_root):
    with dashboard_client(
        runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root],
        raise_server_exceptions=False,
    ) as c:  # fmt: skip
        c.headers.update(AUTH)
        for n in (HUGE, "-" + HUGE, "9223372036854775808", "-1", "0"):
            assert c.get(f"/api/jobs/{n}").status_code == 404, n
            assert c.post(f"/api/jobs/{n}/cancel").status_code == 404, n
            if n != "0":  # rollout 0 exists
                assert c.get(f"/api/runs/demo/rollouts/{n}").status_code == 404, n
            r = c.get(f"/api/runs/demo/rollouts?limit={n}")
            assert r.status_code == 200 and len(r.json()) <= 6, n
        assert c.get("/api/runs/demo/rollouts/9223372036854775807").status_code == 404
        assert c.get("/api/runs/a%00b/metrics").status_code == 404
        r = c.post("/api/jobs", json=job(snapshot_root / "sample", max_turns=int(HUGE)))
        assert r.status_code == 400 and "max_turns" in r.json()["detail"]


# -- finding 4 and the query bound: request size -------------------------------------------
def test_an_overlong_query_is_refused(runs_dir, tmp_path, snapshot_root, spawned):
    limits = ServerLimits(dashboard_max_query_chars=100)
    with dashboard_client(
        runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root], limits=limits
    ) as c:
        c.headers.update(AUTH)
        r = c.post("/api/jobs", json=job(snapshot_root / "sample", query="x" * 101))
        assert r.status_code == 400 and "100" in r.json()["detail"]
        for bad in ("   ", "a\x00b"):
            r = c.post("/api/jobs", json=job(snapshot_root / "sample", query=bad))
            assert r.status_code == 400
        raw = json.dumps(job(snapshot_root / "sample", query="@")).replace("@", "\\ud800")
        r = c.post("/api/jobs", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "Unicode" in r.json()["detail"]
        assert no_jobs(c, tmp_path) and spawned == []
        r = c.post("/api/jobs", json=job(snapshot_root / "sample", query="x" * 100))
        assert r.status_code == 201 and len(spawned) == 1


def test_a_body_over_the_cap_is_refused_before_it_is_read(
    runs_dir, tmp_path, snapshot_root, spawned
):
    limits = ServerLimits(dashboard_max_body_bytes=1024)
    with dashboard_client(
        runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root], limits=limits
    ) as c:
        c.headers.update(AUTH)
        big = json.dumps(job(snapshot_root / "sample", query="x" * 2000)).encode()
        r = c.post("/api/jobs", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "1024" in r.json()["detail"]

        def chunks():  # no Content-Length: counted as it arrives
            for i in range(0, len(big), 256):
                yield big[i : i + 256]

        r = c.post("/api/jobs", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert c.request("GET", "/api/runs", content=b"x" * 2000).status_code == 413
        assert no_jobs(c, tmp_path) and spawned == []


# -- the command line: no open bind, bad settings stop it ----------------------------------
def dashboard_cli(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cheetah.cli", "dashboard", "--jobs-dir", str(tmp_path / "j"),
         "--port", "9", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )  # fmt: skip


def test_the_cli_refuses_a_bind_beyond_loopback_without_a_token(runs_dir, tmp_path):
    r = dashboard_cli("--host", "0.0.0.0", "--runs", str(runs_dir), tmp_path=tmp_path)
    assert r.returncode == 2
    assert "--host 0.0.0.0" in r.stderr and "--token-file" in r.stderr


def test_the_cli_refuses_bad_settings(runs_dir, tmp_path):
    bad_limits = tmp_path / "limits.toml"
    bad_limits.write_text("dashboard_max_body_bytes = -1\n")
    short = tmp_path / "short-token"
    short.write_text("abc")
    cases = [
        (["--limits", str(bad_limits)], "dashboard_max_body_bytes"),
        (["--limits", str(tmp_path / "none.toml")], "none.toml"),
        (["--snapshot-root", str(tmp_path / "missing")], "--snapshot-root"),
        (["--model-root", str(tmp_path / "missing")], "--model-root"),
        (["--token-file", str(short)], "16"),
    ]
    for extra, said in cases:
        r = dashboard_cli("--runs", str(runs_dir), *extra, tmp_path=tmp_path)
        assert r.returncode == 2 and said in r.stderr, (extra, r.stderr)
