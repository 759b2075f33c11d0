"""Fixtures for the sandbox suite: an isolated in-process env and real env server processes.

Isolation needs bubblewrap and (for overlay and cgroups) root; `make test` installs
bubblewrap. Where the host cannot isolate, these tests skip and say why.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from cheetah.harness.protocol import parse_message, render_call
from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.launch import EnvServerProcess
from cheetah.sandbox.protocol import ExecRequest
from cheetah.sandbox.reclaim import reclaim_dead_sessions
from tests.conftest import SAMPLE_REPO

BIN = Path(sys.executable).parent
LIMITS = {
    "memory_mb": 256,
    "pids_max": 64,
    "cpus": 1.0,
    "cpu_time_s": 3,
    "nproc": 2000,
    "file_size_mb": 32,
    "disk_mb": 64,
    "tmp_mb": 32,
}
# For sessions that run real work (a project's pytest): 3 CPU seconds is about what pytest
# itself takes on a busy 2-core machine, so a suite could be cut between its last test and
# its summary. The attack tests keep LIMITS.
WORK_LIMITS = {**LIMITS, "cpu_time_s": 60}


def _caps():
    return detect(SandboxConfig().uid, SandboxConfig().gid)


needs_isolation = pytest.mark.skipif(not _caps().isolated, reason=_caps().describe())


@pytest.fixture
def small_config() -> SandboxConfig:
    return SandboxConfig(**LIMITS)


@pytest.fixture
def work_config() -> SandboxConfig:
    return SandboxConfig(**WORK_LIMITS)


class ServerProc(EnvServerProcess):
    """A started ``cheetah env serve`` process with the small test limits (or ``config``);
    clients may name the sample repo and paths under ``tmp`` (its snapshot roots)."""

    def __init__(self, tmp: Path, config: SandboxConfig | None = None, **kw) -> None:
        kw.setdefault("snapshot_roots", [SAMPLE_REPO, tmp])
        super().__init__(tmp, config=config or SandboxConfig(**LIMITS), **kw)
        # A hang guard (a server that exits fails at once): on a busy 2-core machine the
        # start alone took 8 s, beside tests that start several servers.
        self.start(timeout_s=180)


@pytest.fixture
def env_server(tmp_path):
    servers: list[ServerProc] = []

    def start(**kw) -> ServerProc:
        servers.append(ServerProc(tmp_path, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()
    # What killed servers left (mounts, cgroups, session dirs): nothing stays mounted.
    for base in {s.base_dir for s in servers}:
        reclaim_dead_sessions(base)


async def still_serving(env) -> None:
    """After an attack, the server (an ``EnvClient``) or in-process ``LocalEnv`` still
    answers: health, a new session, a tool call and an exec in it, stop and close."""
    if isinstance(env, EnvClient):
        assert (await env.health()).ok
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    [r] = await env.run_tools(
        sid, parse_message(render_call("run_terminal", {"command": "echo alive"}))
    )
    assert r.output == "exit code: 0\nalive"
    out = await env.exec(sid, ExecRequest(command="echo alive", timeout_s=120))  # hang guard
    assert out.exit_code == 0 and out.output == "alive\n"
    await env.stop(sid)
    await env.close(sid)


@pytest.fixture
def host(tmp_path) -> dict:
    """Host files a session must never reach: a root-only secret, a victim, a marker name."""
    d = tmp_path / "host"
    d.mkdir(mode=0o700)
    marker = f"HOST-SECRET-{uuid.uuid4().hex}"
    (d / "secret.txt").write_text(marker + "\n")
    os.chmod(d / "secret.txt", 0o600)
    (d / "victim.txt").write_text("victim\n")
    only = f"host-only-{uuid.uuid4().hex[:8]}"
    (d / only).write_text("x")
    return {"dir": d, "rel": str(d).lstrip("/"), "marker": marker, "only": only}
