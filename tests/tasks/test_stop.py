"""``cheetah eval`` stopped by SIGTERM while its episodes run in isolated sessions: it exits
128 + 15 and leaves no session mount or sandboxed process behind (issue 45; before, every
running session stayed mounted until another server on the same sandbox dir reclaimed it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.config import SandboxConfig, default_base_dir
from tests.conftest import mount_points

from .conftest import bug_task

BIN = Path(sys.executable).parent


def _session_mounts() -> list[str]:
    return mount_points(default_base_dir() / "sessions")


@pytest.mark.skipif(
    not detect(SandboxConfig().uid, SandboxConfig().gid).isolated, reason="no isolation here"
)
def test_a_stopped_eval_closes_its_sessions(calc_repo, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(bug_task(calc_repo).model_dump_json() + "\n")
    script = tmp_path / "slow.json"  # each sample sleeps in its sandbox until stopped
    slow = '<tool name="run_terminal"><command>sleep 300</command><timeout>300</timeout></tool>'
    script.write_text(json.dumps([slow, "Done."]))
    argv = ["eval", "--tasks", str(tasks), "--model", f"scripted:{script}", "--samples", "2"]
    argv += ["--concurrency", "2", "--sandbox", "isolated", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(
        [BIN / "cheetah", *argv],
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(_session_mounts()) < 2 and proc.poll() is None:  # both samples running
            assert time.monotonic() < deadline, "the eval never opened its sessions"
            time.sleep(0.2)
        time.sleep(1.0)  # into the sleep commands
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "stopped by SIGTERM" in err
    assert _session_mounts() == []
