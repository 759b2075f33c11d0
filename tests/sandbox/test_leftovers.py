"""A process that used isolated sessions in process and ended without closing them leaves no
runtime mount behind (issue 45: in-process ``TaskEnv``, ``tools run --sandbox`` and the
OpenEnv server each left two read-only bind mounts)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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


@pytest.mark.skipif(
    not detect(SandboxConfig().uid, SandboxConfig().gid).isolated, reason="no isolation here"
)
async def test_the_suite_sees_a_running_sandbox_as_a_leftover_until_it_closes(tmp_path):
    # the no-leftover fixture's own finder: a session's sandboxed command is found (by its
    # cgroup, and by the sandbox uid under this process where there are no cgroups)
    import asyncio

    from cheetah.sandbox.env import LocalEnv
    from cheetah.sandbox.protocol import ExecRequest
    from tests.conftest import leftovers

    before = leftovers()
    # its own base dir (open to the sandbox uid, as /tmp/cheetah-sandbox is): another cgroup
    # tag than the suite's, so only the uid finds it
    base = Path(tempfile.mkdtemp(prefix="cheetah-sandbox-test-uid-", dir="/tmp"))
    base.chmod(0o755)
    env = LocalEnv("isolated", config=SandboxConfig(base_dir=base))
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text("x = 1\n")
    try:
        sid = (await env.create_session(str(tmp_path / "repo"))).session_id
        run = asyncio.create_task(env.exec(sid, ExecRequest(command="sleep 30", timeout_s=60)))
        for _ in range(200):
            new = leftovers() - before
            if any("(uid " in x for x in new):
                break
            await asyncio.sleep(0.1)
        assert any("(uid " in x for x in new), new
        run.cancel()
        await env.close(sid)
    finally:
        await env.aclose()
        if not mount_points(base):
            shutil.rmtree(base, ignore_errors=True)
    for _ in range(100):
        if not (leftovers() - before):
            break
        await asyncio.sleep(0.1)
    assert not (leftovers() - before)
