"""The host must never act on what a session planted: attacks through the file tools, the
diff and the files API, each run against the isolated backend in process and against a real
``cheetah env serve``. A command in the session plants something (a directory it swaps with a
link to ``/`` in a loop, links to host files, FIFOs, sparse files, loops, deep trees); the host
then reads, lists, greps, edits, diffs and writes there. Nothing of the host may come back,
no host file may change, nothing may hang, and the server serves other sessions afterwards.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from pathlib import Path

import pytest

from cheetah.core.safefs import SafeRoot
from cheetah.core.wire import ToolCall
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv
from cheetah.sandbox.protocol import EnvError, ExecRequest, WriteFilesRequest
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import LIMITS, needs_isolation, still_serving

pytestmark = [needs_isolation, pytest.mark.timeout(300)]

SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
end = time.time() + float(sys.argv[1])
open("started", "w").close()
n = 0
while time.time() < end:
    libc.renameat2(-100, b"d", -100, b"l", 2)  # RENAME_EXCHANGE: d <-> l, atomically
    n += 1
print("swaps", n)
"""


@pytest.fixture(params=["in-process", "server"])
async def env(request, env_server, tmp_path):
    """The same attacks against ``LocalEnv("isolated")`` and an ``EnvClient`` to a server."""
    if request.param == "in-process":
        cfg = SandboxConfig(**{**LIMITS, "cpu_time_s": 20})
        local = LocalEnv("isolated", config=cfg)
        yield local
        await local.close_all()
    else:
        server = env_server()
        client = EnvClient(server.url, server.token)
        yield client
        await client.aclose()


def call(i: int, name: str, **args: str) -> ToolCall:
    return ToolCall(index=i, name=name, args=args)


async def sh(env, sid: str, command: str, timeout_s: float = 30) -> str:
    r = await env.exec(sid, ExecRequest(command=command, timeout_s=timeout_s))
    assert r.exit_code == 0, r.output
    return r.output


def leaked(text: str, host: dict) -> bool:
    return host["marker"] in text or host["only"] in text


def host_untouched(host: dict) -> None:
    names = sorted(os.listdir(host["dir"]))
    assert names == sorted(["secret.txt", "victim.txt", host["only"]]), names
    assert (host["dir"] / "victim.txt").read_text() == "victim\n"
    assert (host["dir"] / "secret.txt").read_text() == host["marker"] + "\n"


async def plant_swap_pair(env, sid: str, host: dict) -> str:
    """``d/<host dir path>`` is a benign copy of the host dir's layout; ``l`` links to ``/``."""
    rel = host["rel"]
    await env.write_files(
        sid,
        WriteFilesRequest.of(
            {
                f"d/{rel}/secret.txt": b"benign\n",
                f"d/{rel}/victim.txt": b"victim\n",
                "swap.py": SWAPPER.encode(),
            }
        ),
    )
    await sh(env, sid, "ln -s / l")
    return rel


def race_calls(rel: str, start: int, n: int) -> list[ToolCall]:
    calls = []
    for i in range(start, start + n):
        calls += [
            call(len(calls) + 1, "read_file", path=f"d/{rel}/secret.txt"),
            call(len(calls) + 2, "list_dir", path=f"d/{rel}"),
            call(len(calls) + 3, "grep", pattern="HOST-SECRET|benign", path=f"d/{rel}"),
            call(len(calls) + 4, "edit_file", path=f"d/{rel}/planted-{i}.txt", new_str="owned"),
            call(
                len(calls) + 5,
                "edit_file",
                path=f"d/{rel}/victim.txt",
                old_str="victim",
                new_str=f"owned-{i}",
            ),
        ]
    return calls


async def test_swap_race_in_process_leaks_nothing(tmp_path, host):
    """The swapper runs as a command of the session while the host serves every file route;
    the calls start only once it is swapping, so both states are met many times."""
    cfg = SandboxConfig(**{**LIMITS, "cpu_time_s": 30})
    env = LocalEnv("isolated", config=cfg)
    try:
        sid = (await env.create_session(str(SAMPLE_REPO))).session_id
        rel = await plant_swap_pair(env, sid, host)
        bs = env.sessions[sid].backend_session
        swap = asyncio.create_task(bs.exec("python swap.py 8", timeout_s=60))
        files = SafeRoot(bs.root)
        for _ in range(2000):
            if files.kind("started") == "file":
                break
            await asyncio.sleep(0.01)
        assert files.kind("started") == "file"
        outputs: list[str] = []
        for round_ in range(6):
            results = await env.run_tools(sid, race_calls(rel, round_ * 10, 10))
            outputs += [r.output for r in results]
            d = await env.diff(sid)
            outputs.append(d.diff)
            tree = (await env.read_files(sid)).tree()
            outputs += [k + v.decode(errors="replace") for k, v in tree.items()]
            put = WriteFilesRequest.of({f"d/{rel}/put-{round_}.txt": b"put"})
            try:
                await env.write_files(sid, put)
            except EnvError as e:
                assert e.status == 400
            if swap.done():
                break
        swaps = await swap
        assert "swaps" in swaps.output
        text = "\n".join(outputs)
        assert not leaked(text, host)
        # Both states were met: the race was really run.
        assert "benign" in text and "symbolic link" in text
        host_untouched(host)
        await still_serving(env)
    finally:
        await env.close_all()


async def test_swap_race_through_one_message_and_concurrent_diffs(env, host):
    """What a model can do over the API: one message runs the swapper and, staged behind
    lint/edit calls that make them wait, hundreds of file calls; diffs run beside it."""
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    rel = await plant_swap_pair(env, sid, host)
    # 2.5 s of swapping, whatever the load; the limit only guards a hang (a sandboxed python's
    # start on a busy machine takes seconds).
    calls = [call(1, "run_terminal", command="python swap.py 2.5", timeout="120")]
    for stage in range(5):
        # lint reads '.', and an edit of '.' (an error) writes '.': everything after waits.
        calls.append(call(len(calls) + 1, "lint", paths="swap.py"))
        calls.append(call(len(calls) + 1, "edit_file", path=".", new_str="x"))
        for c in race_calls(rel, stage * 6, 6):
            calls.append(call(len(calls) + 1, c.name, **c.args))
    batch = asyncio.create_task(env.run_tools(sid, calls))
    diffs = []
    while not batch.done():
        diffs.append((await env.diff(sid)).diff)
        await asyncio.sleep(0.01)
    results = await batch
    assert "swaps" in results[0].output
    text = "\n".join([r.output for r in results] + diffs + [(await env.diff(sid)).diff])
    assert not leaked(text, host)
    host_untouched(host)
    await still_serving(env)


async def test_planted_links_are_never_followed(env, host):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    secret = host["dir"] / "secret.txt"
    await sh(
        env,
        sid,
        f"ln -sf {secret} .gitignore && mkdir -p pkg && ln -s {secret} pkg/.gitignore && "
        f"ln -s {secret} link.txt && ln -s {host['dir']} mid && "
        "mkdir zero && ln -s /dev/zero zero/.gitignore && echo 'x = 1' > zero/a.py",
    )
    results = await env.run_tools(
        sid,
        [
            call(1, "grep", pattern="HOST|def"),
            call(2, "list_dir", depth="3"),
            call(3, "read_file", path="link.txt"),
            call(4, "read_file", path="mid/secret.txt"),
            call(5, "edit_file", path="link.txt", old_str="HOST", new_str="x"),
            call(6, "edit_file", path="mid/new.txt", new_str="owned"),
            call(7, "edit_file", path="mid/victim.txt", old_str="victim", new_str="owned"),
            call(8, "list_dir", path="mid"),
            call(9, "grep", pattern="x", path="mid"),
            call(10, "grep", pattern="x", path="zero"),
            call(11, "lint", paths="mid"),
            call(12, "read_file", path="zero/.gitignore"),
        ],
    )
    for r in results:
        assert "Traceback" not in r.output
    assert not results[0].is_error and not results[1].is_error  # the rules are just absent
    assert all(r.is_error for r in results[2:9])
    assert "symbolic link" in results[2].output and "symbolic link" in results[3].output
    text = "\n".join(r.output for r in results)
    text += (await env.diff(sid)).diff
    text += "".join(v.decode(errors="replace") for v in (await env.read_files(sid)).tree().values())
    assert not leaked(text, host)
    with pytest.raises(EnvError) as e:
        await env.write_files(sid, WriteFilesRequest.of({"mid/put.txt": b"owned"}))
    assert e.value.status == 400
    host_untouched(host)
    await still_serving(env)


async def test_fifos_and_special_files_never_block(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    await sh(env, sid, "mkfifo p && mkdir q && mkfifo q/.gitignore && mkfifo q/f.py")
    calls = [call(i + 1, "read_file", path="p") for i in range(8)]
    calls += [
        call(9, "grep", pattern="x"),
        call(10, "list_dir", path="q"),
        call(11, "edit_file", path="p", old_str="a", new_str="b"),
        call(12, "edit_file", path="q/f.py", new_str="b"),
        call(13, "grep", pattern="x", path="q"),
    ]
    results = await asyncio.wait_for(env.run_tools(sid, calls), timeout=120)
    assert all(r.is_error for r in results[:8]), [r.output for r in results[:8]]
    assert all("not a regular file" in r.output for r in results[:8])
    assert results[10].is_error and results[11].is_error
    await asyncio.wait_for(env.diff(sid), timeout=60)
    tree = (await asyncio.wait_for(env.read_files(sid), timeout=60)).tree()
    assert "p" not in tree and "q/f.py" not in tree
    with pytest.raises(EnvError) as e:
        await env.write_files(sid, WriteFilesRequest.of({"p": b"data"}))
    assert e.value.status == 400
    await still_serving(env)


async def test_loops_deep_trees_and_long_names_give_clear_errors(env):
    sid = (await env.create_session(str(SAMPLE_REPO))).session_id
    deep = "/".join(["d"] * 150)
    await sh(
        env,
        sid,
        f"ln -s loop loop && ln -s b a && ln -s a b && mkdir -p {deep} && echo x > {deep}/f.py",
    )
    long_name = "n" * 300
    results = await env.run_tools(
        sid,
        [
            call(1, "read_file", path="loop"),
            call(2, "read_file", path="a/x"),
            call(3, "grep", pattern="x"),
            call(4, "list_dir", depth="3"),
            call(5, "read_file", path=long_name),
            call(6, "read_file", path="x/" * 3000),
            call(7, "edit_file", path=f"{long_name}/f", new_str="x"),
            call(8, "read_file", path=f"{deep}/f.py"),
        ],
    )
    for r in results:
        assert "Traceback" not in r.output and "inside the tool" not in r.output, r.output
    assert [r.is_error for r in results] == [True, True, False, False, True, True, True, False]
    assert "too long" in results[5].output
    assert (await env.diff(sid)).paths  # the loops and the deep file are changes
    tree = (await env.read_files(sid)).tree()
    assert "loop" not in tree
    bad = WriteFilesRequest(files={"ok.txt": "not base64!"})
    with pytest.raises(EnvError) as e:
        await env.write_files(sid, bad)
    assert e.value.status == 400 and "base64" in str(e.value)
    for path in ("../x", "/etc/x", "x/" * 3000, long_name):
        with pytest.raises(EnvError) as e:
            await env.write_files(sid, WriteFilesRequest.of({path: b"x"}))
        assert e.value.status == 400
    await still_serving(env)


async def test_sparse_files_cost_their_limits_not_their_size(tmp_path):
    """A 280 MB sparse file (a few KB on disk): the host's reads stay bounded in memory."""
    cfg = SandboxConfig(**{**LIMITS, "file_size_mb": 512})
    env = LocalEnv("isolated", config=cfg)
    try:
        sid = (await env.create_session(str(SAMPLE_REPO))).session_id
        await sh(env, sid, "truncate -s 280M big.txt && printf 'a%.0s' $(seq 1 100) >> big.txt")
        tracemalloc.start()
        try:
            results = await env.run_tools(
                sid,
                [
                    call(1, "read_file", path="big.txt"),
                    call(2, "grep", pattern="a"),
                    call(3, "edit_file", path="big.txt", old_str="a", new_str="b"),
                ],
            )
            d = await env.diff(sid)
            with pytest.raises(EnvError) as e:
                await env.read_files(sid)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert results[0].is_error and "binary" in results[0].output
        assert results[2].is_error and "bytes" in results[2].output
        assert e.value.status == 413
        assert "Large files" in d.diff and "big.txt" in d.paths
        assert peak < 48 << 20, f"host peak {peak >> 20} MB"
        await still_serving(env)
    finally:
        await env.close_all()


def test_tools_and_diff_leave_host_paths_alone_through_a_planted_upper_layer(tmp_path):
    """The diff walks the overlay's upper layer on the host: a link planted there is named,
    never entered (checked on the backend's own helpers, no server needed)."""
    from cheetah.sandbox.diff import layer_paths, read_content

    upper, lower = tmp_path / "upper", tmp_path / "lower"
    (upper / "d").mkdir(parents=True)
    lower.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST")
    os.symlink("/", upper / "d" / "root")
    os.symlink(secret, upper / "s")
    paths = layer_paths(SafeRoot(upper), SafeRoot(lower))
    assert paths == {"d/root", "s"}
    assert read_content(SafeRoot(upper), "s") == b"symlink -> " + bytes(Path(secret))
