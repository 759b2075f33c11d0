"""Task workspaces as isolated sessions, in process or on an env server started for the eval
(the default): the oracle solves tasks, graded inside the sandbox."""

import json
import os
import subprocess

import pytest

from cheetah.bundled import TASK_SETS
from tests.sandbox.conftest import BIN, needs_isolation

pytestmark = needs_isolation


@pytest.mark.parametrize("sandbox", ["isolated", "fleet"])
def test_eval_oracle_in_isolated_sessions(tmp_path, sandbox):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    r = subprocess.run(
        [
            BIN / "cheetah",
            "eval",
            "--tasks",
            TASK_SETS / "benchmark.jsonl",
            "--model",
            "oracle",
            "--out",
            tmp_path / "ev",
            "--tier",
            "easy",
            "--split",
            "heldout",
            "--limit",
            "2",
            "--sandbox",
            sandbox,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert report["summary"]["pass@1"] == 1.0 and report["summary"]["errors"] == 0
    md = (tmp_path / "ev" / "report.md").read_text()
    if sandbox == "fleet":
        assert "fleet of 1 env server(s): bubblewrap" in md
    else:
        assert "sessions: isolated" in md
