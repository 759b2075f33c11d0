"""For the dashboard tests: a small run store made the way `cheetah train` writes one, a
snapshot root holding the sample repo, and a TestClient on a fresh dashboard."""

import shutil
import time

import pytest
from fastapi.testclient import TestClient

from cheetah.dashboard.app import create_app
from cheetah.harness.trajectory import CallRecord, Message, Trajectory, Turn
from cheetah.rl.store import RunStore
from cheetah.rl.timing import PhaseClock
from tests.conftest import SAMPLE_REPO


def make_run(runs_dir, name="demo", n=6):
    store = RunStore(runs_dir / name / "run.sqlite")
    for i in range(n):
        traj = Trajectory(
            query=f"fix task {i}",
            policy="engine:tiny",
            task_id=f"task-{i % 3}",
            messages=[
                Message(role="system", content="tools..."),
                Message(role="user", content=f"fix task {i}"),
                Message(
                    role="assistant", content='<tool name="read_file"><path>a.py</path></tool>'
                ),
            ],
            turns=[
                Turn(
                    index=0,
                    assistant="...",
                    calls=[
                        CallRecord(
                            index=1, name="read_file", args={}, output="x", is_error=i % 2 == 0
                        )
                    ],
                    policy_version=i // 2,
                )
            ],
            stop_reason="finished",
            wall_s=2.0 + i,
            reward=1.0 if i == 5 else 0.0,
            grade={"correct": i == 5, "conventions": 1.0, "diff": "--- a/a.py\n"},
        )
        store.add_rollout(
            i, i // 2, traj.task_id, i % 2, traj.reward, [i // 2], traj.model_dump_json()
        )
        time.sleep(0.01)
    store.log_metrics(1, {"reward_mean": 0.0, "pass_rate": 0.0, "call_success": 0.5})
    store.log_metrics(2, {"reward_mean": 0.5, "pass_rate": 0.5, "call_success": 0.75})
    # held-out points of the learning curve (train.eval_every), as a run stores them
    store.log_metrics(1, {"heldout_pass_rate": 0.25, "heldout_turns_per_task": 4.0})
    store.log_metrics(2, {"heldout_pass_rate": 0.5, "heldout_turns_per_task": 3.0})
    clock = PhaseClock(store)  # where the time went, as TrainJob records it
    clock.add("stage:base", 30.0)
    clock.add("rl:waiting_for_rollouts", 90.0)
    store.set_meta("pass_rate_before", {"rate": 0.0, "n": 4})
    store.set_meta("pass_rate_after", {"rate": 0.25, "n": 4})
    store.close()


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    make_run(d)
    (d / "not-a-run").mkdir()
    return d


TOKEN = "dashboard-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def dashboard_client(runs_dir, tmp_path, **kw) -> TestClient:
    """A TestClient on a fresh dashboard; it sends ``Host: testserver``, so the Host check is
    off unless a test passes ``allowed_hosts``."""
    kw.setdefault("allowed_hosts", None)
    raise_errors = kw.pop("raise_server_exceptions", True)
    app = create_app(runs_dir, tmp_path / "jobs", **kw)
    return TestClient(app, raise_server_exceptions=raise_errors)


@pytest.fixture
def snapshot_root(tmp_path):
    """A snapshot root (resolved) holding one repo, ``sample``."""
    root = tmp_path / "repos"
    shutil.copytree(SAMPLE_REPO, root / "sample", ignore=shutil.ignore_patterns("__pycache__"))
    return root.resolve()
