"""Hostile commands against a real env server: each is contained, and the server serves on.

Limits for these sessions (tests/sandbox/conftest.py LIMITS): 256 MB memory, 64
processes, 3 CPU seconds per command, 32 MB files, 64 MB of changes, 32 MB /tmp.
"""

import asyncio
import contextlib
import os
import shlex
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from cheetah.harness.protocol import parse_message, render_call
from cheetah.sandbox.client import EnvClient
from tests.conftest import REPO_ROOT, SAMPLE_REPO
from tests.sandbox.conftest import needs_isolation, still_serving

pytestmark = [needs_isolation, pytest.mark.timeout(240)]

# A command's limit only guards a hang: `find /` in a sandbox with a third of a core (a busy
# CI machine) ran past 20 s. Where a test needs the limit to fire, it sets its own.
COMMAND_TIMEOUT_S = 120


def sh(command: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
    return render_call("run_terminal", {"command": command, "timeout": str(timeout)})


@pytest.fixture
async def client(env_server):
    server = env_server()
    c = EnvClient(server.url, server.token)
    c.server = server
    yield c
    await c.aclose()


async def new_session(client) -> str:
    return (await client.create_session(str(SAMPLE_REPO))).session_id


async def terminal(client, sid, command, timeout=COMMAND_TIMEOUT_S):
    [r] = await client.run_tools(sid, parse_message(sh(command, timeout)))
    return r


async def test_host_files_are_invisible(client):
    sid = await new_session(client)
    r = await terminal(
        client,
        sid,
        "cat /etc/shadow; ls -A /root; "
        f"ls {REPO_ROOT}/cheetah; cat {REPO_ROOT}/pyproject.toml; echo end",
    )
    out = r.output
    assert "No such file or directory" in out and "root:" not in out
    host_root = set(os.listdir("/root")) - {".pyenv"}
    assert not any(name in out.split() for name in host_root)
    assert "[project]" not in out and out.endswith("end")
    await still_serving(client)


async def test_other_sessions_are_invisible(client):
    a, b = await new_session(client), await new_session(client)
    await terminal(client, a, "echo secret-of-a > mine.txt")
    r = await terminal(
        client, b, "cat mine.txt; find / -name mine.txt 2>/dev/null | head; echo end"
    )
    assert "secret-of-a" not in r.output and r.output.endswith("end")
    [g] = await client.run_tools(
        b, parse_message(render_call("grep", {"pattern": "secret-of-a", "path": "/"}))
    )
    assert g.is_error and "absolute" in g.output
    await still_serving(client)


async def test_system_dirs_and_proc_sys_are_read_only(client):
    sid = await new_session(client)
    r = await terminal(
        client,
        sid,
        "touch /usr/evil; echo 1 > /proc/sys/kernel/hostname; touch /etc/evil; echo end",
    )
    assert r.output.count("Read-only file system") >= 2 and r.output.endswith("end")
    assert not os.path.exists("/usr/evil") and not os.path.exists("/etc/evil")
    await still_serving(client)


async def test_no_network(client):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def accept() -> None:
        # may end in an error once the close below has taken the socket away
        with contextlib.suppress(OSError):
            listener.accept()

    threading.Thread(target=accept, daemon=True).start()
    sid = await new_session(client)
    r = await terminal(
        client,
        sid,
        f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\" 2>&1 | tail -1; "
        "python -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\" 2>&1 | tail -1; "
        "getent hosts pypi.org || echo no-dns",
    )
    lines = r.output.splitlines()
    assert "ConnectionRefusedError" in lines[1]
    assert "Network is unreachable" in lines[2]
    assert lines[3] == "no-dns"
    listener.close()
    await still_serving(client)


async def test_fork_bomb_is_contained(client):
    sid = await new_session(client)
    r = await terminal(
        client, sid, "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=8
    )
    assert "Resource temporarily unavailable" in r.output or r.output.endswith("survived")
    await still_serving(client)


async def test_memory_hog_is_killed(client):
    sid = await new_session(client)
    r = await terminal(
        client, sid, "python -c \"x = bytearray(1024**3); print('ALLOC' + 'ATED')\"; echo rc=$?"
    )
    assert "ALLOCATED" not in r.output
    assert "rc=137" in r.output or "MemoryError" in r.output
    await still_serving(client)


async def test_cpu_loop_is_stopped_by_cpu_time_limit(client):
    sid = await new_session(client)
    # SIGXCPU/SIGKILL after 3 CPU seconds. Those take a wall time that depends on the
    # machine's load (a third of a core: 9 s and more), so the command's limit is far above
    # them; the exit status (printed by the shell, which a timeout would have killed too) is
    # what shows the CPU limit, not the timeout, ended the loop.
    r = await terminal(client, sid, "python -c 'while True: pass'; echo rc=$?", timeout=180)
    assert "rc=152" in r.output or "rc=137" in r.output
    assert not r.meta["timed_out"]
    await still_serving(client)


async def test_disk_and_file_size_limits(client):
    sid = await new_session(client)
    r = await terminal(client, sid, "head -c 100M /dev/zero > big; echo rc=$?; ls -la big")
    assert "rc=153" in r.output or "File size limit exceeded" in r.output  # SIGXFSZ at 32 MB
    r = await terminal(
        client,
        sid,
        "for i in 1 2 3; do head -c 30M /dev/zero > f$i; done; df -m . | tail -1",
    )
    assert "No space left on device" in r.output
    r = await terminal(client, sid, "truncate -s 10G huge; echo rc=$?")
    assert "rc=0" not in r.output
    await still_serving(client)


async def test_signalling_the_server_fails(client):
    sid = await new_session(client)
    pid = client.server.proc.pid
    r = await terminal(client, sid, f"kill -9 {pid}; kill -9 -1; echo end")
    assert r.output.endswith("end")
    assert client.server.proc.poll() is None
    await still_serving(client)


async def test_symlink_and_dotdot_escapes(client):
    sid = await new_session(client)
    target = f"/tmp/cheetah-escape-{uuid.uuid4().hex}"  # a host path nothing else uses
    await terminal(client, sid, "ln -s /etc/passwd pw; ln -s / rootlink; ln -s ../.. up")
    msg = "".join(
        [
            render_call("read_file", {"path": "pw"}),
            render_call("list_dir", {"path": "rootlink"}),
            render_call("read_file", {"path": "up/etc/hostname"}),
            render_call("read_file", {"path": "../../../../etc/passwd"}),
            render_call("edit_file", {"path": f"rootlink{target}", "new_str": "x"}),
            render_call("grep", {"pattern": "root", "path": "rootlink/etc"}),
        ]
    )
    results = await client.run_tools(sid, parse_message(msg))
    assert all(r.is_error for r in results), [r.output for r in results]
    for r in results:  # refused as an escape, or as a link the host never follows
        assert "outside the workspace" in r.output or "symbolic link" in r.output, r.output
        assert "root:" not in r.output
    assert not os.path.exists(target)
    await still_serving(client)


async def test_background_processes_die_at_close(client):
    sid = await new_session(client)
    marker = f"sleep 4242{os.getpid() % 100}"

    async def long_command():
        try:
            await terminal(client, sid, f"setsid {marker} & nohup {marker} & {marker}", timeout=600)
        except Exception:
            pass

    task = asyncio.create_task(long_command())
    # Waits for events, not for fixed times: a busy machine starts (and kills) slowly.
    await _until(lambda: _running(marker), "the command to run")
    t0 = time.monotonic()
    await client.close(sid)
    # Far below the command's 600 s limit, far above what closing takes on a busy machine.
    assert time.monotonic() - t0 < 120, "close must not wait for the command's timeout"
    await _until(lambda: not _running(marker), "the command's processes to die")
    task.cancel()
    await still_serving(client)


async def _until(predicate, what: str, limit_s: float = 60.0) -> None:
    """Poll ``predicate`` until true; the limit is a hang guard, not a timing assert."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, f"still waiting for {what} after {limit_s:g} s"
        await asyncio.sleep(0.05)


def _running(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmd.strip() == marker:
                return True
    return False


async def test_io_uring_and_the_keyring_are_refused(client):
    """The seccomp filter: io_uring (the door of most recent kernel exploits) and the
    keyring (shared by every session's uid) answer EPERM; ordinary syscalls work."""
    if "seccomp" not in (await client.health()).isolation:
        pytest.skip("no seccomp filter for this architecture")
    probe = (
        "import ctypes, errno\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, nr, args in [('io_uring_setup', 425, (1, 0)), ('add_key', 248, (0,) * 5),"
        " ('getppid', 110, ())]:\n"
        "    r = libc.syscall(nr, *args)\n"
        "    print(name, errno.errorcode.get(ctypes.get_errno()) if r < 0 else 'ok')\n"
    )
    sid = await new_session(client)
    r = await terminal(client, sid, f"python3 -c {shlex.quote(probe)}")
    if os.uname().machine == "x86_64":
        assert r.output.splitlines()[1:] == ["io_uring_setup EPERM", "add_key EPERM", "getppid ok"]
    await still_serving(client)
