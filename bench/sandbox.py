"""Sandbox figures: session create/reset, per-call overhead, and a loopback load test.

1. create and reset p50/p99 for a 5,000-file repo on the isolated backend (goal:
   create <= 50 ms, reset <= 100 ms; anchors: Firecracker ~125 ms to guest init,
   Daytona "sub-90 ms", E2B ~150 ms). Create = create_session + first use ready;
   the snapshot is materialized once before timing (its one-off cost is printed).
2. per-call overhead: the same call locally (LocalWorkspace), in an isolated session
   (in process) with and without the seccomp filter, and through an env server on
   loopback; medians and ratios, all in the same run.
3. load: 50 concurrent sessions x 20 tool calls through one env server on loopback;
   errors, p50/p99 call latency, throughput.

    python bench/sandbox.py [--files 5000] [--reps 50] [--sessions 50] [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from cheetah.core.workspace import LocalWorkspace
from cheetah.harness.loop import LocalTools
from cheetah.harness.protocol import parse_message, render_call
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1000:8.2f} ms"


def make_repo(root: Path, files: int) -> None:
    per_dir = 50
    for i in range(files):
        d = root / f"pkg{i // per_dir:03d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i % per_dir:02d}.py").write_text(f"def f_{i}(x):\n    return x + {i}\n")


async def create_reset(repo: Path, reps: int) -> None:
    env = LocalEnv("isolated", capacity=reps + 8)
    print(f"isolation: {env.isolation}")
    t0 = time.perf_counter()
    first = await env.create_session(f"dir:{repo}")
    print(f"snapshot materialized once (copy + chown): {ms(time.perf_counter() - t0)}")
    await env.close(first.session_id)
    creates, closes, resets = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        info = await env.create_session(f"dir:{repo}")
        creates.append(time.perf_counter() - t0)
        sid = info.session_id
        await env.run_tools(
            sid,
            parse_message(
                render_call(
                    "edit_file",
                    {
                        "path": "pkg000/mod00.py",
                        "old_str": "return x + 0",
                        "new_str": "return x - 0",
                    },
                )
            ),
        )
        t0 = time.perf_counter()
        await env.reset(sid)
        resets.append(time.perf_counter() - t0)
        assert (await env.diff(sid)).paths == []
        t0 = time.perf_counter()
        await env.close(sid)
        closes.append(time.perf_counter() - t0)
    print(f"create  p50 {ms(pct(creates, 50))}  p99 {ms(pct(creates, 99))}   goal <= 50 ms")
    print(f"reset   p50 {ms(pct(resets, 50))}  p99 {ms(pct(resets, 99))}   goal <= 100 ms")
    print(f"close   p50 {ms(pct(closes, 50))}  p99 {ms(pct(closes, 99))}")


CALLS = {
    "run_terminal true": render_call("run_terminal", {"command": "true"}),
    "read_file": render_call("read_file", {"path": "pkg000/mod01.py"}),
    "grep (5k files)": render_call("grep", {"pattern": "f_4999"}),
}


async def overhead(repo: Path, server_url: str, token: str, reps: int) -> None:
    local = LocalTools(LocalWorkspace(repo))
    env = LocalEnv("isolated")
    sid = (await env.create_session(f"dir:{repo}")).session_id
    plain = LocalEnv("isolated", config=SandboxConfig(seccomp=False))
    psid = (await plain.create_session(f"dir:{repo}")).session_id
    client = EnvClient(server_url, token)
    rsid = (await client.create_session(f"dir:{repo}")).session_id
    print(
        f"{'call':20s} {'local':>11s} {'no seccomp':>11s} {'isolated':>11s} {'server':>11s}"
        "  seccomp/none  iso/local  server/local"
    )
    for name, msg in CALLS.items():
        calls = parse_message(msg)
        times: dict[str, list[float]] = {"local": [], "plain": [], "iso": [], "srv": []}
        for _ in range(reps):
            runners = (
                ("local", lambda c=calls: local.run_tools(c)),
                ("plain", lambda c=calls: plain.run_tools(psid, c)),
                ("iso", lambda c=calls: env.run_tools(sid, c)),
                ("srv", lambda c=calls: client.run_tools(rsid, c)),
            )
            for key, fn in runners:
                t0 = time.perf_counter()
                [r] = await fn()
                times[key].append(time.perf_counter() - t0)
                assert not r.is_error, r.output
        m = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{name:20s} {ms(m['local'])} {ms(m['plain'])} {ms(m['iso'])} {ms(m['srv'])}  "
            f"{m['iso'] / m['plain']:11.2f}x  {m['iso'] / m['local']:8.1f}x"
            f"  {m['srv'] / m['local']:10.1f}x"
        )
    await env.aclose()
    await plain.aclose()
    await client.close(rsid)
    await client.aclose()


async def load(repo: Path, server_url: str, token: str, sessions: int, calls: int) -> None:
    client = EnvClient(server_url, token)
    lat: list[float] = []
    errors: list[str] = []
    mix = [
        render_call("read_file", {"path": "pkg001/mod02.py"}),
        render_call("grep", {"pattern": "f_12", "path": "pkg000"}),
        render_call("run_terminal", {"command": "echo ok"}),
        render_call("edit_file", {"path": "notes.txt", "new_str": "x"}),
    ]

    async def one(i: int) -> None:
        try:
            sid = (await client.create_session(f"dir:{repo}")).session_id
        except Exception as e:
            errors.append(f"create: {e}")
            return
        for k in range(calls):
            msg = mix[k % 3] if k != 5 else mix[3]
            t0 = time.perf_counter()
            try:
                [r] = await client.run_tools(sid, parse_message(msg))
                if r.is_error:
                    errors.append(r.output)
            except Exception as e:
                errors.append(f"call: {e}")
            lat.append(time.perf_counter() - t0)
        await client.close(sid)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    wall = time.perf_counter() - t0
    await client.aclose()
    print(
        f"{sessions} sessions x {calls} calls: {len(lat)} calls in {wall:.2f} s "
        f"({len(lat) / wall:.0f} calls/s), errors: {len(errors)}"
    )
    print(f"call latency p50 {ms(pct(lat, 50))}  p99 {ms(pct(lat, 99))}  max {ms(max(lat))}")
    if errors:
        print("first error:", errors[0][:300])


def start_server(tmp: Path, capacity: int) -> tuple[subprocess.Popen, str, str]:
    token = secrets.token_hex(16)
    (tmp / "token").write_text(token)
    port = 8790 + os.getpid() % 100
    bin_dir = Path(sys.executable).parent
    proc = subprocess.Popen(
        [
            bin_dir / "cheetah",
            "env",
            "serve",
            "--port",
            str(port),
            "--token-file",
            str(tmp / "token"),
            "--capacity",
            str(capacity),
            "--snapshot-root",
            str(tmp),
        ],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/health", timeout=1)
            return proc, url, token
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("env server did not start")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        make_repo(repo, args.files)
        print(f"\n## create / reset ({args.files} files, {args.reps} reps)")
        await create_reset(repo, args.reps)
        proc, url, token = start_server(Path(tmp), capacity=args.sessions + 8)
        try:
            print(f"\n## per-call overhead (median of {args.reps})")
            await overhead(repo, url, token, args.reps)
            print("\n## loopback load test")
            await load(repo, url, token, args.sessions, args.calls)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
