"""Attacks on the session lifecycle, in process and against real env servers.

- Processes across sessions: all sessions run as one uid, so RLIMIT_NPROC would be
  shared; with the pids cgroup each session has its own limit and two sessions full of
  processes do not stop a third from starting commands.
- Hostile session ids (paths, ``.``, 300 characters, NUL): 400 naming the rule, and
  nothing created outside the sessions dir or under the cgroup parents.
- ``stop`` racing the start of a command: the command dies, it never runs to its end.
- A server killed with SIGKILL: the next server on its base dir takes back its mounts,
  cgroups and dirs and serves on; the sessions of a live server are never touched.

No timing is asserted; the waits are hang guards far above the normal run.
"""

import asyncio
import dataclasses
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from cheetah.sandbox.capabilities import CGROUP_V1, CONTROLLERS
from cheetah.sandbox.cgroups import PARENT, group_name
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv
from cheetah.sandbox.isolated import IsolatedSession
from cheetah.sandbox.protocol import EnvError, ExecRequest
from cheetah.sandbox.reclaim import (
    InvalidSessionId,
    read_owner,
    reclaim_dead_sessions,
    write_owner,
)
from cheetah.sandbox.snapshot import SnapshotSpec
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import LIMITS, needs_isolation, still_serving
from tests.sandbox.test_security import terminal

pytestmark = [needs_isolation, pytest.mark.timeout(240)]


@pytest.fixture
async def env(small_config):
    env = LocalEnv("isolated", config=small_config)
    yield env
    await env.close_all()


async def new_session(env) -> str:
    return (await env.create_session(str(SAMPLE_REPO))).session_id


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as fh:
        return {line.split()[4] for line in fh}


def running(marker: str) -> list[int]:
    """Processes whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


async def wait_for(predicate, what: str, limit_s: float = 60.0) -> None:
    """Poll ``predicate`` until true; the limit is a hang guard, not a timing assert."""
    for _ in range(int(limit_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still waiting for {what} after {limit_s:g} s")


# -- processes across sessions ------------------------------------------------------------

# The sleeps outlast any correct run by far: only the stop below ends them, however busy the
# host (with 60 s, a slow run could see them end by themselves before the third session's work).
HOLD = "for i in $(seq 55); do sleep 600 & done; echo held; wait"
FORK_MANY = (
    'python -c "\n'
    "import os, time\n"
    "n = 0\n"
    "try:\n"
    "    for _ in range(100):\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "        n += 1\n"
    "except OSError as e:\n"
    "    print('stopped after', n, e.strerror)\n"
    '"'
)


async def test_process_limit_is_per_session_not_per_uid():
    """nproc 100 for the uid, 64 per session: two sessions at ~58 each (116 processes of the
    sandbox uid) leave a third one working, and a session's own limit still binds."""
    cfg = SandboxConfig(**{**LIMITS, "nproc": 100, "pids_max": 64})
    env = LocalEnv("isolated", config=cfg)
    if "pids" not in env.backend.caps.cgroups:
        pytest.skip("no pids cgroup: RLIMIT_NPROC (shared by all sessions) is the only limit")
    holders = []
    try:
        a, b, c = [await new_session(env) for _ in range(3)]
        holders = [
            asyncio.create_task(env.exec(s, ExecRequest(command=HOLD, timeout_s=300)))
            for s in (a, b)
        ]

        def pids(sid: str) -> int:
            d = env.sessions[sid].backend_session.cgroups.dirs["pids"]
            return int((d / "pids.current").read_text())

        # 55 sleeps + bash + bwrap's two processes: more than nproc / 2 each.
        for s in (a, b):
            await wait_for(lambda s=s: pids(s) >= 58, f"58 processes in session {s}")
        assert pids(a) + pids(b) > cfg.nproc
        r = await env.exec(c, ExecRequest(command="echo alive", timeout_s=60))
        assert (r.exit_code, r.output) == (0, "alive\n"), r.output
        r = await env.exec(c, ExecRequest(command=FORK_MANY, timeout_s=60))
        assert "stopped after" in r.output, r.output
        assert int(r.output.split()[2]) < cfg.pids_max
    finally:
        try:
            for s in list(env.sessions)[:2]:
                await env.stop(s)
            done = await asyncio.wait_for(asyncio.gather(*holders), timeout=60)
        finally:
            await env.close_all()
    for r in done:  # every holder forked all its sleeps: nothing failed for lack of room
        assert "held" in r.output and "unavailable" not in r.output, r.output


# -- hostile session ids -----------------------------------------------------------------


def _cgroup_names() -> set[str]:
    names: set[str] = set(os.listdir(CGROUP_V1))
    for c in CONTROLLERS:
        for d in (CGROUP_V1 / c, CGROUP_V1 / c / PARENT):
            if d.is_dir():
                names |= set(os.listdir(d))
    return names


async def test_hostile_session_ids_are_refused(env, env_server, tmp_path):
    mark = uuid.uuid4().hex[:10]
    sessions_dir = env.backend.sessions_dir
    outside = tmp_path / f"abs-{mark}"
    bad = [
        f"../../x-{mark}",
        str(outside),
        f"u{mark}/b",
        ".",
        "..",
        "",
        "a" * 300,
        f"nul\x00{mark}",
        f"-lead{mark}",
        f"nl{mark}\n",
        f"sp {mark}",
    ]
    before = set(os.listdir(sessions_dir))
    for sid in bad:
        with pytest.raises(EnvError) as e:
            await env.create_session(str(SAMPLE_REPO), sid)
        assert e.value.status == 400 and "1 to 64 characters" in str(e.value), sid
        with pytest.raises(EnvError) as e:  # any operation naming such an id
            await env.stop(sid)
        assert e.value.status == 400
    server = env_server()
    client = EnvClient(server.url, server.token)
    try:
        for sid in (f"../../x-{mark}", str(outside), f"nul\x00{mark}"):
            with pytest.raises(EnvError) as e:
                await client.create_session(str(SAMPLE_REPO), sid)
            assert e.value.status == 400 and "1 to 64 characters" in str(e.value)
        await still_serving(client)
    finally:
        await client.aclose()
    # The backend refuses them too, whoever calls it.
    lower = env.backend.snapshots.materialize(SnapshotSpec.parse(str(SAMPLE_REPO)))
    for sid in bad:
        with pytest.raises(InvalidSessionId):
            await env.backend.create(SnapshotSpec.parse(str(SAMPLE_REPO)), sid)
        with pytest.raises(InvalidSessionId):
            IsolatedSession(env.backend, lower, sid)
    assert env.sessions == {}
    assert not (sessions_dir / f"../../x-{mark}").resolve().exists()
    assert not outside.exists() and not (sessions_dir / f"u{mark}").exists()
    assert {n for n in set(os.listdir(sessions_dir)) - before if mark in n} == set()
    assert not any(mark in n for n in _cgroup_names())
    # A good id works, and is taken once per base dir (another server's included).
    good = f"task_{mark}-1"
    assert (await env.create_session(str(SAMPLE_REPO), good)).session_id == good
    other = LocalEnv("isolated", config=env.backend.cfg)
    for e_ in (env, other):
        with pytest.raises(EnvError) as e:
            await e_.create_session(str(SAMPLE_REPO), good)
        assert e.value.status == 409
    assert other.sessions == {}
    r = await env.exec(good, ExecRequest(command="echo ok", timeout_s=60))
    assert r.output == "ok\n"


# -- stop racing the start of a command ------------------------------------------------------


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroups", "no-cgroups"])
async def test_stop_kills_a_command_that_is_starting(small_config, cgroups):
    env = LocalEnv("isolated", config=small_config)
    if not cgroups:  # as without root: no cgroup to find the command in
        env.backend.caps = dataclasses.replace(
            env.backend.caps, root=False, overlay=False, cgroups=()
        )
    elif not env.backend.caps.cgroups:
        pytest.skip("no cgroups on this host")
    mark = f"m{uuid.uuid4().hex[:12]}"
    command = f"sleep 600; echo finished {mark}"
    try:
        sid = await new_session(env)
        for i in range(20):
            # The exec's own limit (900 s) is above the sleep: only the stop can end it early.
            task = asyncio.create_task(env.exec(sid, ExecRequest(command=command, timeout_s=900)))
            # From "as soon as the exec task has run" up to a few ms into the launch.
            await asyncio.sleep(0 if i < 6 else (i - 6) * 0.0015)
            await env.stop(sid)
            # A missed stop runs 600 s; a caught one ends at once. 120 s: a hang guard with
            # room for a busy machine's slow kill, and still far below the 600 s.
            r = await asyncio.wait_for(task, timeout=120)
            assert "finished" not in r.output and r.exit_code != 0, (i, r)
            # ... and nothing of it lives on, detached from the exec (the sandbox's init
            # outliving a killed launcher would still print "finished", to nobody).
            await wait_for(lambda: not running(mark), f"the end of try {i}'s command")
        r = await env.exec(sid, ExecRequest(command="echo after", timeout_s=60))
        assert r.output == "after\n"  # the session still runs commands after its stops
    finally:
        await env.close_all()


# -- a dead server's leftovers ---------------------------------------------------------


async def test_killed_servers_leftovers_are_reclaimed_by_the_next(env_server):
    live = env_server()  # shares the base dir with the others, alive throughout
    dying = env_server()
    lc, dc = EnvClient(live.url, live.token), EnvClient(dying.url, dying.token)
    try:
        kept = (await lc.create_session(str(SAMPLE_REPO))).session_id
        sids = [(await dc.create_session(str(SAMPLE_REPO))).session_id for _ in range(2)]
        base = dying.base_dir
        dirs = [base / "sessions" / s for s in sids]
        targets = {str((d / n).resolve()) for d in dirs for n in ("merged", "layer")}
        assert targets <= mount_points()
        groups = [CGROUP_V1 / c / PARENT / group_name(base, s) for s in sids for c in CONTROLLERS]
        groups = [g for g in groups if g.is_dir()]
        dying.kill()
        assert targets <= mount_points()  # nothing took them back yet
        # A process that outlived its server in one of the sessions.
        stray = subprocess.Popen(["sleep", "300"])
        if groups:
            (groups[0] / "cgroup.procs").write_text(str(stray.pid))

        fresh = env_server()  # same base dir: takes back what the dead one left
        assert not targets & mount_points()
        assert not any(d.exists() for d in dirs)
        assert not any(g.exists() for g in groups)
        if groups:
            assert stray.wait(timeout=30) == -9
        stray.kill()
        stray.wait()
        fc = EnvClient(fresh.url, fresh.token)
        try:
            await still_serving(fc)
        finally:
            await fc.aclose()
        # The live server's session was left alone.
        r = await terminal(lc, kept, "echo kept")
        assert r.output == "exit code: 0\nkept"
        assert str((live.base_dir / "sessions" / kept / "merged").resolve()) in mount_points()
    finally:
        await lc.aclose()
        await dc.aclose()


async def test_reclaim_spares_live_owners_and_sees_through_reused_pids(env):
    sid = await new_session(env)
    base = env.backend.cfg.base_dir
    d = env.backend.sessions_dir / sid
    merged = str((d / "merged").resolve())
    assert sid not in {r.session_id for r in reclaim_dead_sessions(base)}
    assert merged in mount_points()
    r = await env.exec(sid, ExecRequest(command="echo still", timeout_s=60))
    assert r.output == "still\n"
    # Our pid, another start time: the pid of a dead owner, reused by a live process.
    owner = read_owner(d)
    assert owner is not None and owner.pid == os.getpid()
    write_owner(d, dataclasses.replace(owner, start=owner.start - 1))
    [mine] = [r for r in reclaim_dead_sessions(base) if r.session_id == sid]
    assert mine.removed and len(mine.unmounted) == 2
    assert merged not in mount_points() and not d.exists()
    await env.close(sid)  # closing what was reclaimed is harmless


def test_session_dirs_record_their_owner_and_cgroups_are_named_per_base_dir():
    a, b = Path("/tmp/cheetah-a"), Path("/tmp/cheetah-b")
    assert group_name(a, "s1") != group_name(b, "s1")
    assert group_name(a, "s1").endswith("-s1")
