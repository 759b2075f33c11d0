"""Task generation on fetched real code: sandboxed vs trusted, same repos, one run.

For each repo (laid out by ``cheetah tasks fetch``, with its environment), the generator runs
twice with the same seed and mutants: trusted (copies on this host, unsandboxed) and
sandboxed (isolated task sessions, the environment read-only at /env), alternating which goes
first. Reported per repo and overall: tasks kept, wall seconds, CPU seconds (the machine's
busy time over the run: keep the machine otherwise idle) and tasks kept per CPU-hour; the
figure the issue sets a bound on is the sandboxed/trusted ratio of CPU seconds per kept
task (< 1.5x).

    python bench/generation_throughput.py --repos appdirs inflection six --max-mutants 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cheetah.tasks.fetched import envs_dir, repos_dir
from cheetah.tasks.generate import GenerateConfig, generate_tasks
from cheetah.tasks.session import local_sessions

FAST = ["appdirs", "boltons", "cachetools", "inflection", "isodate", "ordered-set", "six", "tinydb"]


def cpu_s() -> float:
    """Busy CPU seconds of the whole machine (``/proc/stat``): sandboxed commands are not
    this process's waited-for children (``getrusage`` sees none of their time), so the
    machine's count is the one that holds for both modes. Run it on an otherwise idle machine."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


async def one(repo: Path, config: GenerateConfig, sandboxed: bool) -> dict:
    sessions = local_sessions("isolated") if sandboxed else None
    t0, c0 = time.perf_counter(), cpu_s()
    result = await generate_tasks(repo, config, sessions=sessions)
    return {
        "kept": len(result.tasks),
        "wall": time.perf_counter() - t0,
        "cpu": cpu_s() - c0,
        "stats": result.stats,
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repos", nargs="+", default=FAST, help="fetched repo names")
    p.add_argument("--max-mutants", type=int, default=20)
    p.add_argument("--concurrency", type=int, default=2)
    args = p.parse_args()
    rows, ratios = [], []
    print(f"{'repo':14s} {'mode':9s} {'kept':>4s} {'tried':>5s} {'wall s':>7s} {'cpu s':>7s} "
          f"{'kept/cpu-h':>10s}", flush=True)  # fmt: skip
    for i, name in enumerate(args.repos):
        repo, env = repos_dir() / name, envs_dir() / name
        if not repo.is_dir():
            sys.exit(f"{repo} is not fetched: run `cheetah tasks fetch --only {name}`")
        config = GenerateConfig(
            max_mutants=args.max_mutants,
            max_tasks=args.max_mutants,
            concurrency=args.concurrency,
            env=str(env) if (env / "pyvenv.cfg").is_file() else None,
        )
        order = [False, True] if i % 2 == 0 else [True, False]
        got = {}
        for sandboxed in order:
            got[sandboxed] = r = await one(repo, config, sandboxed)
            mode = "sandboxed" if sandboxed else "trusted"
            rate = r["kept"] / r["cpu"] * 3600 if r["cpu"] else 0.0
            print(f"{name:14s} {mode:9s} {r['kept']:4d} {r['stats']['tried']:5d} "
                  f"{r['wall']:7.1f} {r['cpu']:7.1f} {rate:10.0f}", flush=True)  # fmt: skip
            rows.append((name, mode, r))
        if got[True]["kept"] and got[False]["kept"]:
            ratios.append(
                (got[True]["cpu"] / got[True]["kept"]) / (got[False]["cpu"] / got[False]["kept"])
            )
    for mode in ("trusted", "sandboxed"):
        kept = sum(r["kept"] for _, m, r in rows if m == mode)
        cpu = sum(r["cpu"] for _, m, r in rows if m == mode)
        wall = sum(r["wall"] for _, m, r in rows if m == mode)
        print(f"overall {mode}: {kept} tasks kept, {cpu:.0f} CPU s, {wall:.0f} wall s, "
              f"{kept / cpu * 3600:.0f} tasks per CPU-hour")  # fmt: skip
    if ratios:
        lo, mid, hi = min(ratios), statistics.median(ratios), max(ratios)
        print(f"sandboxed/trusted CPU s per kept task: median {mid:.2f}x over "
              f"{len(ratios)} repos (min {lo:.2f}, max {hi:.2f})")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
