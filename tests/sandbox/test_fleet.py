"""EnvFleet over real env server processes: placement, backpressure, surviving a dead server."""

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from cheetah.bundled import TASK_SETS
from cheetah.harness.loop import run_agent
from cheetah.harness.policy import ScriptedPolicy
from cheetah.harness.protocol import parse_message
from cheetah.sandbox.env import SessionTools
from cheetah.sandbox.fleet import EnvFleet
from cheetah.sandbox.protocol import EnvError
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import needs_isolation

pytestmark = needs_isolation
TOKEN = "fleet-test-token-0123456789"


async def test_least_loaded_placement_and_backpressure(env_server):
    a = env_server(capacity=1, token=TOKEN)
    b = env_server(capacity=1, token=TOKEN)
    # A hang guard: s3 waits for s1's close (0.8 s, then a sandbox teardown, slow on a busy
    # machine); the refusal below sets its own short wait.
    fleet = EnvFleet([a.url, b.url], TOKEN, max_wait_s=120)
    await fleet.check_health()
    try:
        s1 = await fleet.create_session(str(SAMPLE_REPO))
        s2 = await fleet.create_session(str(SAMPLE_REPO))
        assert {
            fleet.sessions[s1.session_id].server.url,
            fleet.sessions[s2.session_id].server.url,
        } == {a.url, b.url}

        async def free_one_later():
            await asyncio.sleep(0.8)
            await fleet.close(s1.session_id)

        t0 = time.monotonic()
        closer = asyncio.create_task(free_one_later())
        s3 = await fleet.create_session(str(SAMPLE_REPO))  # waits: both servers are full
        await closer
        assert time.monotonic() - t0 >= 0.8
        [r] = await fleet.run_tools(s3.session_id, parse_message('<tool name="list_dir"></tool>'))
        assert r.output.startswith("./\n")
        fleet.max_wait_s = 0.5
        with pytest.raises(EnvError) as e:
            await fleet.create_session(str(SAMPLE_REPO))
        assert e.value.status == 429 and "all full or down" in str(e.value)
    finally:
        await fleet.aclose()


class KillServerAfter:
    """A scripted policy that kills the server hosting the session before turn ``n``."""

    def __init__(self, messages, n, kill):
        self.inner, self.n, self.kill, self.turn = ScriptedPolicy(messages), n, kill, 0
        self.name = "scripted+kill"

    async def generate(self, messages):
        self.turn += 1
        if self.turn == self.n:
            self.kill()
        return await self.inner.generate(messages)


async def test_rollout_survives_a_server_dying_mid_session(env_server, work_config):
    # these sessions run the sample repo's pytest: work_config's CPU time
    a, b = env_server(token=TOKEN, config=work_config), env_server(token=TOKEN, config=work_config)
    fleet = EnvFleet([a.url, b.url], TOKEN, max_wait_s=10)
    procs = {a.url: a, b.url: b}
    try:
        sid = (await fleet.create_session(str(SAMPLE_REPO))).session_id
        first = fleet.sessions[sid].server.url
        script = [
            '<tool name="edit_file"><path>textkit/stats.py</path><old_str>ranked[: n - 1]</old_str>'
            "<new_str>ranked[:n]</new_str></tool>"
            '<tool name="todo"><items>- [x] fix</items></tool>',
            '<tool name="run_terminal"><command>echo step2 > log.txt</command></tool>',
            '<tool name="run_terminal"><command>echo step3 >> log.txt; cat log.txt; '
            "python -m pytest -q 2>&1 | tail -1</command></tool>",
            "Done.",
        ]
        policy = KillServerAfter(script, 3, lambda: procs[first].kill())
        traj = await run_agent("fix it", policy, SessionTools(fleet, sid))
        assert traj.stop_reason == "finished", traj.stop_detail
        assert not any(c.is_error for c in traj.calls), [c.output for c in traj.calls]
        last = traj.turns[2].calls[0].output
        assert "step2\nstep3" in last and "8 passed" in last
        assert fleet.failovers == 1 and fleet.sessions[sid].server.url != first
        d = await fleet.diff(sid)
        assert d.paths == ["log.txt", "textkit/stats.py"]
    finally:
        await fleet.aclose()


class OracleKillingServer:
    """The oracle, but the server hosting its session is killed before its third turn."""

    def __init__(self, task, fleet, procs):
        from cheetah.tasks.oracle import OraclePolicy

        self.inner, self.fleet, self.procs = OraclePolicy(task), fleet, procs
        self.name, self.turn = "oracle+kill", 0

    async def generate(self, messages):
        self.turn += 1
        if self.turn == 3:
            [s] = self.fleet.sessions.values()
            self.procs[s.server.url].kill()
        return await self.inner.generate(messages)


async def test_eval_through_the_fleet_grades_right_after_a_server_dies(
    env_server, work_config, tmp_path
):
    from cheetah.tasks.evaluate import EvalConfig, run_eval
    from cheetah.tasks.loaders import load_tasks, select_tasks
    from cheetah.tasks.session import TaskSessionOpener

    [task] = select_tasks(load_tasks(TASK_SETS / "benchmark.jsonl"), limit=1)
    # these sessions run the sample repo's pytest: work_config's CPU time
    a, b = env_server(token=TOKEN, config=work_config), env_server(token=TOKEN, config=work_config)
    fleet = EnvFleet([a.url, b.url], TOKEN, max_wait_s=10)
    procs = {a.url: a, b.url: b}
    try:
        report = await run_eval(
            [task],
            lambda t: OracleKillingServer(t, fleet, procs),
            TaskSessionOpener(fleet),
            EvalConfig(),
            out_dir=tmp_path,
        )
        [sample] = report.samples
        assert sample.error is None and sample.correct, sample
        assert fleet.failovers == 1  # the snapshot was uploaded to the second server on failover
        assert len(fleet._uploaded) == 2
        traj = json.loads(Path(sample.trajectory).read_text())
        assert traj["grade"]["touched"] and not traj["grade"]["errors"]
    finally:
        await fleet.aclose()


async def test_fleet_uploads_again_when_a_server_lost_the_snapshot(env_server):
    from cheetah.sandbox.config import default_base_dir
    from cheetah.tasks.checkout import pack_tree

    a = env_server(token=TOKEN)
    fleet = EnvFleet([a.url], TOKEN, max_wait_s=10)
    try:
        snapshot = fleet.add_snapshot(pack_tree(SAMPLE_REPO))
        s1 = await fleet.create_session(snapshot)
        await fleet.close(s1.session_id)
        sha = snapshot.partition(":")[2]
        unpacked = default_base_dir() / "snapshots" / f"tar-{sha[:20]}"
        assert unpacked.is_dir()  # the server keeps the unpacked copy, not the tarball
        assert not (default_base_dir() / "uploads" / f"{sha}.tar").exists()
        shutil.rmtree(unpacked)  # as if a fresh machine now answered at the same URL
        s2 = await fleet.create_session(snapshot)
        assert unpacked.is_dir()
        [r] = await fleet.run_tools(s2.session_id, parse_message('<tool name="list_dir"></tool>'))
        assert "textkit/" in r.output
    finally:
        await fleet.aclose()
