"""The dashboard's API over a run store, the fleet and background jobs."""

import json
import time

from tests.dashboard.conftest import AUTH, TOKEN
from tests.dashboard.conftest import dashboard_client as client


def test_runs_metrics_timeline_and_trajectories(runs_dir, tmp_path):
    with client(runs_dir, tmp_path) as c:
        [run] = c.get("/api/runs").json()
        assert run["name"] == "demo" and run["rollouts"] == 6 and run["steps"] == 2
        assert run["pass_rate_after"] == 0.25
        m = c.get("/api/runs/demo/metrics").json()
        assert m["reward_mean"] == [[1, 0.0], [2, 0.5]]
        rollouts = c.get("/api/runs/demo/rollouts").json()
        assert [r["rollout_id"] for r in rollouts] == list(range(6))
        r5 = rollouts[5]
        assert r5["correct"] and r5["end"] - r5["start"] == 7.0 and r5["tool_calls"] == 1
        # spans overlap (each lasts seconds, they finished 10 ms apart): one lane each
        assert sorted(r["lane"] for r in rollouts) == list(range(6))
        t = c.get("/api/runs/demo/rollouts/3").json()
        assert t["query"] == "fix task 3"
        assert c.get("/api/runs/demo/rollouts/99").status_code == 404
        assert c.get("/api/runs/nope/metrics").status_code == 404
        assert c.get("/api/runs/..%2Fx/metrics").status_code in (404, 422)
        assert c.get("/").status_code == 200 and "cheetah dashboard" in c.get("/").text


def test_token_guards_the_api(runs_dir, tmp_path):
    with client(runs_dir, tmp_path, token=TOKEN) as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers=AUTH).status_code == 200
        # the page and the files it loads carry no data
        assert c.get("/").status_code == 200
        assert c.get("/static/app.js").status_code == 200
        assert c.get("/static/style.css").status_code == 200


def test_fleet_reports_a_dead_server_without_failing(runs_dir, tmp_path):
    with client(runs_dir, tmp_path, env_urls=["http://127.0.0.1:9"], env_token="t" * 16) as c:
        [s] = c.get("/api/fleet").json()
        assert s["healthy"] is False and s["error"]


def test_background_job_runs_the_agent_on_an_isolated_copy(runs_dir, tmp_path, snapshot_root):
    models = tmp_path / "models"
    models.mkdir()
    script = models / "steps.json"
    script.write_text(json.dumps(['<tool name="list_dir"></tool>', "Nothing to change."]))
    roots = {"snapshot_roots": [snapshot_root], "model_roots": [models.resolve()]}
    with client(runs_dir, tmp_path, token=TOKEN, **roots) as c:
        c.headers.update(AUTH)
        nope = str(snapshot_root / "nope")
        bad = c.post("/api/jobs", json={"query": "q", "repo": nope, "model": "default"})
        assert bad.status_code == 400 and "not a directory" in bad.json()["detail"]
        repo = str(snapshot_root / "sample")
        job = c.post(
            "/api/jobs",
            json={"query": "look around", "repo": repo, "model": f"scripted:{script}"},
        ).json()
        assert job["repo"] == repo and job["model"] == f"scripted:{script.resolve()}"
        deadline = time.monotonic() + 120
        while c.get(f"/api/jobs/{job['id']}").json()["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        detail = c.get(f"/api/jobs/{job['id']}").json()
        assert detail["status"] == "finished" and detail["exit_code"] == 0, detail["log"]
        assert detail["trajectory"]["stop_reason"] == "finished"
        assert [j["id"] for j in c.get("/api/jobs").json()] == [job["id"]]
        assert c.post(f"/api/jobs/{job['id']}/cancel").status_code == 409


def test_runs_given_one_run_folder_lists_that_run(runs_dir, tmp_path):
    with client(runs_dir / "demo", tmp_path) as c:
        [run] = c.get("/api/runs").json()
        assert run["name"] == "demo" and run["rollouts"] == 6
        assert c.get("/api/runs/demo/metrics").json()["reward_mean"] == [[1, 0.0], [2, 0.5]]
        assert c.get("/api/runs/demo/rollouts/3").json()["query"] == "fix task 3"
        assert c.get("/api/runs/other/metrics").status_code == 404


def test_with_jobs_off_the_dashboard_writes_no_jobs_database(runs_dir, tmp_path, snapshot_root):
    jobs = tmp_path / "jobs"
    for kw in ({}, {"token": TOKEN}, {"snapshot_roots": [snapshot_root]}):  # each lacks one
        with client(runs_dir, tmp_path, **kw) as c:
            headers = AUTH if "token" in kw else {}
            assert c.get("/api/jobs", headers=headers).json() == []
            assert c.get("/api/jobs/1", headers=headers).status_code == 404
        assert not jobs.exists(), kw
    # jobs an earlier dashboard ran are still listed, read-only
    with client(runs_dir, tmp_path, token=TOKEN, snapshot_roots=[snapshot_root]) as c:
        assert c.get("/api/jobs", headers=AUTH).json() == []
    import sqlite3

    with sqlite3.connect(jobs / "jobs.sqlite") as db:
        db.execute(
            "INSERT INTO jobs (query, repo, model, max_turns, status, created) "
            "VALUES ('q', '/r', 'default', 3, 'finished', 0)"
        )
    before = (jobs / "jobs.sqlite").read_bytes()
    with client(runs_dir, tmp_path) as c:
        [old] = c.get("/api/jobs").json()
        assert old["query"] == "q" and old["status"] == "finished"
    assert (jobs / "jobs.sqlite").read_bytes() == before


def test_a_job_a_limit_stopped_is_marked_limit_not_failed(tmp_path, snapshot_root):
    from cheetah.dashboard.jobs import JobManager, JobRules

    jobs = JobManager(tmp_path / "jobs", JobRules((snapshot_root,), (), 1000))
    traj, _ = jobs.paths(1)
    assert jobs._stopped_or_failed(1) == "failed"  # no trajectory: the agent never ran
    traj.write_text(json.dumps({"stop_reason": "limit", "stop_detail": "turn limit of 1"}))
    assert jobs._stopped_or_failed(1) == "limit"  # `cheetah agent` exited 3
    traj.write_text(json.dumps({"stop_reason": "error"}))
    assert jobs._stopped_or_failed(1) == "failed"
