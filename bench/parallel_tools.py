"""Serial against concurrent execution of one assistant message's tool calls.

One message of 10 calls (default mix: 6 x `run_terminal sleep 0.1`, 2 greps over a
~200-file tree, 2 reads), run through the real batch runner, once call by call and
once as a batch, alternating, --reps times. Prints per-call serial times, the median
wall times and their ratio. Goal: concurrent at least 5x faster than serial.

    python bench/parallel_tools.py [--reps 7] [--sleeps 6]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cheetah.core.workspace import LocalWorkspace
from cheetah.harness.protocol import parse_message, render_call
from cheetah.tools import default_tools
from cheetah.tools.base import ToolContext
from cheetah.tools.batch import run_batch


def make_tree(root: Path, modules: int = 200) -> None:
    pkg = root / "pkg"
    pkg.mkdir()
    for i in range(modules):
        body = "".join(
            f"def handler_{i}_{j}(request):\n    return parse_{j % 7}(request)\n\n"
            for j in range(40)
        )
        (pkg / f"mod_{i:03d}.py").write_text(body)


def message(sleeps: int) -> str:
    calls = [render_call("run_terminal", {"command": "sleep 0.1"}) for _ in range(sleeps)]
    greps = [{"pattern": r"def handler_1\d_3\b"}, {"pattern": "parse_6", "glob": "mod_00*.py"}]
    reads = [{"path": "pkg/mod_000.py"}, {"path": "pkg/mod_150.py", "start_line": "40"}]
    rest = 10 - sleeps
    extra = [("grep", g) for g in greps] + [("read_file", r) for r in reads]
    calls += [render_call(n, a) for n, a in extra[:rest]]
    return "\n".join(calls)


async def one_rep(ctx: ToolContext, text: str) -> tuple[float, float, list[float]]:
    tools = default_tools()
    calls = parse_message(text)
    t0 = time.perf_counter()
    per_call = []
    for call in calls:
        c0 = time.perf_counter()
        await run_batch([call], ctx, tools)
        per_call.append(time.perf_counter() - c0)
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = await run_batch(calls, ctx, tools)
    concurrent = time.perf_counter() - t0
    errors = [r.output for r in results if r.is_error]
    if errors:
        sys.exit(f"a call failed: {errors[0]}")
    return serial, concurrent, per_call


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sleeps", type=int, default=6, help="terminal sleep calls among the 10")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        make_tree(Path(tmp))
        ctx = ToolContext(workspace=LocalWorkspace(tmp))
        text = message(args.sleeps)
        await one_rep(ctx, text)  # warm-up: page cache, imports
        runs = [await one_rep(ctx, text) for _ in range(args.reps)]
    names = [c.name for c in parse_message(text)]
    serials, concs = [r[0] for r in runs], [r[1] for r in runs]
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print("per-call serial time, median over reps (ms):")
    for i, name in enumerate(names):
        print(f"  {i + 1:2d} {name:13s} {statistics.median(r[2][i] for r in runs) * 1000:7.1f}")
    s, c = statistics.median(serials), statistics.median(concs)
    print(
        f"serial     median {s * 1000:7.1f} ms  (min {min(serials) * 1000:.1f}, max {max(serials) * 1000:.1f})"
    )
    print(
        f"concurrent median {c * 1000:7.1f} ms  (min {min(concs) * 1000:.1f}, max {max(concs) * 1000:.1f})"
    )
    print(f"speedup (serial / concurrent, medians): {s / c:.2f}x   goal >= 5x")


if __name__ == "__main__":
    asyncio.run(main())
