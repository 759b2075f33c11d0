"""Per-call cost of host-side file access: path checks (before issue 10) vs descriptors (now).

Three ways to read one small file of a session, each timed in the same run:

1. ``path-checked``: what the tools did before issue 10 and the race that came with it:
   ``Path.resolve()`` and a containment check, then ``open()`` by path;
2. ``SafeRoot``: what they do now: ``openat2`` (no links, beneath the root) + ``fstat``;
3. ``sandboxed cat``: the other design the issue names, running the read inside the
   session (one ``bwrap`` command per call; a resident daemon would cost an RPC instead).

Then whole tool calls (read_file, grep over the repo, list_dir, edit_file) through the
batch runner, with today's code and, given ``--before DIR`` (a checkout of the code
before issue 10, e.g. ``git worktree add /tmp/before becefd1``), with that code in a
subprocess of the same run; and the diff of an isolated session. Medians of ``--reps``.

    python bench/file_tools.py [--reps 300] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cheetah.core.wire import ToolCall
from cheetah.core.workspace import LocalWorkspace, resolve_path
from cheetah.tools import default_tools
from cheetah.tools.base import ToolContext
from cheetah.tools.batch import run_batch

REPO = Path(__file__).resolve().parents[1] / "cheetah" / "data" / "sample_repo"


def median_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def amedian_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def path_checked_read(root: Path, rel: str) -> bytes:
    target = resolve_path(root, rel)
    with target.open("rb") as fh:
        return fh.read(2_000_000)


CALLS = {
    "read_file": {"path": "textkit/tokenize.py"},
    "grep (whole repo)": {"pattern": "def "},
    "list_dir depth 2": {"depth": "2"},
    "edit_file (create)": {"path": "scratch.txt", "new_str": "x"},
}


async def tool_medians(root: Path, reps: int) -> dict[str, float]:
    """Median microseconds of each call in CALLS through the batch runner."""
    ctx = ToolContext(workspace=LocalWorkspace(root))
    tools = default_tools()
    out = {}
    for name, a in CALLS.items():
        tool = name.split()[0]

        async def one(tool=tool, a=a) -> None:
            if tool == "edit_file":
                (root / "scratch.txt").unlink(missing_ok=True)
            [r] = await run_batch([ToolCall(index=1, name=tool, args=a)], ctx, tools)
            assert not r.is_error, r.output

        out[name] = await amedian_us(one, reps)
    return out


def before_medians(tree: str, root: Path, reps: int) -> dict[str, float]:
    """``tool_medians`` with the code of another checkout, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": tree}
    code = (
        "import asyncio, json, sys; sys.path.insert(0, sys.argv[1]); import file_tools as b; "
        "print(json.dumps(asyncio.run(b.tool_medians(b.Path(sys.argv[2]), int(sys.argv[3])))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(root), str(reps)],
        env=env, capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


async def main() -> None:
    from cheetah.core.safefs import SafeRoot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--before", help="a checkout of the code before issue 10, for tool calls")
    args = ap.parse_args()
    reps = args.reps
    rel = CALLS["read_file"]["path"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(REPO, root)
        files = SafeRoot(root)
        base = median_us(lambda: path_checked_read(root, rel), reps)
        safe = median_us(lambda: files.read(rel, 2_000_000), reps)
        print(f"read one file, median of {reps} (us): path-checked {base:.1f}, "
              f"SafeRoot {safe:.1f}  ratio {safe / base:.2f}x")  # fmt: skip
        now = await tool_medians(root, reps)
        before = before_medians(args.before, root, reps) if args.before else {}
        for name, us in now.items():
            was = before.get(name)
            extra = f"  before {was:.1f}  ratio {us / was:.2f}x" if was else ""
            print(f"{name:>18} tool call, median of {reps} (us): now {us:.1f}{extra}")

    try:
        from cheetah.sandbox.env import LocalEnv
        from cheetah.sandbox.protocol import ExecRequest

        env = LocalEnv("isolated")
    except Exception as e:  # no bubblewrap or no root: the sandboxed figures are skipped
        print(f"sandboxed figures skipped: {e}")
        return
    try:
        sid = (await env.create_session(str(REPO))).session_id
        bs = env.sessions[sid].backend_session
        n = max(reps // 10, 10)
        cat = await amedian_us(
            lambda: env.exec(sid, ExecRequest(command=f"cat {rel}", timeout_s=30)), n
        )
        safe_s = median_us(lambda: SafeRoot(bs.root).read(rel, 2_000_000), reps)
        print(f"read one file in an isolated session (us): SafeRoot {safe_s:.1f}, "
              f"sandboxed cat {cat:.0f} (median of {n})  ratio {cat / safe_s:.0f}x")  # fmt: skip
        await env.exec(sid, ExecRequest(command="echo y >> README.md; echo new > new.txt"))
        d = await amedian_us(lambda: env.diff(sid), n)
        print(f"diff of an isolated session with 2 changes, median of {n} (us): {d:.0f}")
    finally:
        await env.close_all()


if __name__ == "__main__":
    asyncio.run(main())
