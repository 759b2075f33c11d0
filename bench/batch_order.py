"""Ordering one batch of tool calls: every pair compared (the old scheduler) against the
trie planner (``tools/order.py``), in the same run.

The batch is the attack of issue 27: alternating reads of the whole workspace ('.') and
writes of distinct files, so every write conflicts with every earlier read. For each size
it prints the time to find what each call waits for and the wait lists' total length (what
the runner keeps in memory), medians of ``--reps``; the pairwise side stops at
``--pairwise-max`` calls (it is quadratic).

    python bench/batch_order.py [--sizes 500 1000 2000 4500 20000] [--reps 3]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time

from cheetah.tools.base import Access
from cheetah.tools.order import Planner, conflicts


def hostile(n: int) -> list[Access]:
    return [
        Access(reads=frozenset({"."})) if i % 2 else Access(writes=frozenset({f"pkg/f{i}.py"}))
        for i in range(n)
    ]


def pairwise(accesses: list[Access]) -> int:
    """The old scheduler: each call waits for every earlier one it conflicts with."""
    return sum(
        sum(1 for j in range(i) if conflicts(accesses[j], accesses[i]))
        for i in range(len(accesses))
    )


def planned(accesses: list[Access]) -> int:
    planner = Planner(len(accesses))
    waits = sum(len(planner.add(a)) for a in accesses)
    return waits + sum(len(j) for j in planner.joins)


def timed(fn, accesses: list[Access], reps: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        size = fn(accesses)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4500, 20000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairwise-max", type=int, default=4500)
    args = ap.parse_args()
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(
        f"{'calls':>7s} {'pairwise':>11s} {'waits':>11s} {'planner':>11s} {'waits':>9s} {'speedup':>8s}"
    )
    for n in args.sizes:
        accesses = hostile(n)
        t_new, w_new = timed(planned, accesses, args.reps)
        if n <= args.pairwise_max:
            t_old, w_old = timed(pairwise, accesses, args.reps)
            old = f"{t_old * 1000:9.1f} ms {w_old:11d}"
            ratio = f"{t_old / t_new:7.0f}x"
        else:
            old, ratio = f"{'-':>12s} {'-':>11s}", f"{'-':>8s}"
        print(f"{n:7d} {old} {t_new * 1000:8.1f} ms {w_new:9d} {ratio}")


if __name__ == "__main__":
    main()
