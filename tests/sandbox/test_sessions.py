"""Session operations on the isolated backend, in process: create, run, diff, reset, fork, close."""

import subprocess
import tarfile

import pytest

from cheetah.harness.protocol import parse_message
from cheetah.sandbox.env import LocalEnv
from cheetah.sandbox.protocol import EnvError
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import needs_isolation

pytestmark = needs_isolation


@pytest.fixture
async def env(work_config):
    env = LocalEnv("isolated", config=work_config)  # a session here runs pytest
    yield env
    await env.close_all()


async def run(env, sid, message):
    return await env.run_tools(sid, parse_message(message))


async def test_commands_run_as_sandbox_user_in_workspace(env):
    info = await env.create_session(f"dir:{SAMPLE_REPO}")
    assert "bubblewrap" in info.isolation
    [r] = await run(
        env, info.session_id, '<tool name="run_terminal"><command>id -u; pwd; ls</command></tool>'
    )
    assert r.output.splitlines()[1:4] == ["10001", "/workspace", "README.md"]


async def test_edits_by_tools_and_commands_mix_and_diff_shows_them(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    msg = (
        '<tool name="edit_file"><path>textkit/stats.py</path><old_str>ranked[: n - 1]</old_str>'
        "<new_str>ranked[:n]</new_str></tool>"
        '<tool name="edit_file"><path>notes/new.md</path><new_str>hi\n</new_str></tool>'
    )
    assert not any(r.is_error for r in await run(env, sid, msg))
    # A command (as the sandbox uid) can change what a tool (on the host) wrote.
    [r] = await run(
        env,
        sid,
        '<tool name="run_terminal"><command>echo more >> notes/new.md && '
        "rm README.md && python -m pytest -q 2>&1 | tail -1</command></tool>",
    )
    assert "8 passed" in r.output, r.output
    d = await env.diff(sid)
    assert d.paths == ["README.md", "notes/new.md", "textkit/stats.py"]
    assert "-    return ranked[: n - 1]\n+    return ranked[:n]" in d.diff
    assert "+hi\n+more" in d.diff and "+++ /dev/null" in d.diff


async def test_reset_fork_and_todo_state(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    await run(
        env,
        sid,
        '<tool name="run_terminal"><command>echo x > a.txt</command></tool>'
        '<tool name="todo"><items>- [ ] one</items></tool>',
    )
    child = (await env.fork(sid)).session_id
    await run(env, child, '<tool name="run_terminal"><command>echo y > b.txt</command></tool>')
    assert (await env.diff(child)).paths == ["a.txt", "b.txt"]
    assert (await env.diff(sid)).paths == ["a.txt"]
    assert [t.text for t in env.sessions[child].ctx.todos] == ["one"]
    await env.reset(sid)
    assert (await env.diff(sid)).paths == []
    assert env.sessions[sid].ctx.todos == []
    assert (await env.diff(child)).paths == ["a.txt", "b.txt"]


async def test_tarball_and_git_snapshots(env, tmp_path):
    tar = tmp_path / "repo.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        tf.add(SAMPLE_REPO, arcname=".")
    sid = (await env.create_session(f"tar:{tar}")).session_id
    [r] = await run(
        env,
        sid,
        '<tool name="read_file"><path>textkit/tokenize.py</path><end_line>1</end_line></tool>',
    )
    assert r.output == '     1\t"""Splitting text into words."""'
    repo = tmp_path / "g"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (repo / "f.txt").write_text("one\n")
    git("add", ".")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "one")
    first = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (repo / "f.txt").write_text("two\n")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "two")
    sid = (await env.create_session(f"git:{repo}@{first}")).session_id
    [r] = await run(env, sid, '<tool name="read_file"><path>f.txt</path></tool>')
    assert r.output == "     1\tone"


async def test_bad_snapshots_and_unknown_sessions_are_clear_errors(env, tmp_path):
    with pytest.raises(EnvError, match="does not exist"):
        await env.create_session(str(tmp_path / "missing"))
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(EnvError, match="cannot extract"):
        await env.create_session(f"tar:{bad}")
    with pytest.raises(EnvError, match="not found"):
        await env.create_session(f"git:{SAMPLE_REPO.parents[2]}@deadbeef")
    with pytest.raises(EnvError) as e:
        await env.run_tools("nope", [])
    assert e.value.status == 404


async def test_capacity_and_idle_reaping(small_config):
    env = LocalEnv("isolated", config=small_config, capacity=1, idle_timeout_s=0.0)
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    with pytest.raises(EnvError) as e:
        await env.create_session(str(SAMPLE_REPO))
    assert e.value.status == 429 and e.value.retry_after
    assert await env.reap_idle() == [sid]
    assert env.sessions == {}
    await env.close_all()
