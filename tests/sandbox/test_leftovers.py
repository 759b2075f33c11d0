"""A process that used isolated sessions in process and ended without closing them leaves no
runtime mount behind (issue 45: in-process ``TaskEnv``, ``tools run --sandbox`` and the
OpenEnv server each left two read-only bind mounts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.config import SandboxConfig
from tests.conftest import mount_points

SCRIPT = """
import asyncio
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.loaders import load_tasks
from cheetah.tasks.session import local_sessions


async def main():
    env = TaskEnv(local_sessions("isolated"))
    await env.reset(load_tasks("benchmark")[0])
    await env.step('<tool name="run_terminal"><command>echo hi</command></tool>')
    await env.close()  # the episode, not the sandbox: no LocalEnv.aclose
    print("runtime mounts:", len(env.sessions.env.backend.runtime))


asyncio.run(main())
"""


@pytest.mark.skipif(
    not detect(SandboxConfig().uid, SandboxConfig().gid).isolated, reason="no isolation here"
)
def test_an_in_process_task_env_that_ends_leaves_no_mount(tmp_path):
    base = tmp_path / "sandbox"
    env = {"CHEETAH_SANDBOX_DIR": str(base), "PATH": "/usr/bin:/bin"}
    try:
        r = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr
        held = int(r.stdout.split("runtime mounts:")[1])
        assert held >= 1 or not detect(0, 0).root  # as root the interpreter is bind-mounted
        assert mount_points(base) == []
    finally:  # never leave a bind mount of the interpreter where tmp_path cleanup would walk
        for point in reversed(mount_points(base)):
            subprocess.run(["umount", "-l", point], check=False)
