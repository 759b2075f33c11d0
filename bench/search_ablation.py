"""Does semantic search help the learned agent? The same checkpoint on the same held-out
tasks, with `codebase_search` on offer and taken away (`cheetah eval --without-tool`).

Runs `cheetah eval` twice (greedy, one sample a task) and prints, paired over the tasks:
pass rate with its Wilson 95% interval, the exact McNemar test, turns per task (exact
Wilcoxon signed-rank), and the search calls the agent made (codebase_search, grep) in each
condition. `--reuse` compares the reports already in `--out` without running again.

    python bench/search_ablation.py --model runs/find/checkpoints/step-3 --tier locate \
        --out /tmp/ablate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired_eval import load, print_paired, run_eval

CONDITIONS = {"with": [], "without": ["--without-tool", "codebase_search"]}
NAMES = {"with": "codebase_search on offer", "without": "codebase_search taken away"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="checkpoint directory (or any --model spec)")
    p.add_argument("--tasks", default="curriculum")
    p.add_argument("--split", default="heldout")
    p.add_argument("--tier", default="locate", help="a finding tier: locate or named")
    p.add_argument("--limit", type=int, default=0, help="first N tasks only (0: all)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reuse", action="store_true", help="compare the reports in --out as they are")
    a = p.parse_args()
    for cond, extra in CONDITIONS.items():
        if not (a.reuse and (a.out / cond / "report.json").is_file()):
            run_eval(
                a.model, a.out / cond, tasks=a.tasks, split=a.split, tier=a.tier,
                max_turns=a.max_turns, max_new_tokens=a.max_new_tokens,
                concurrency=a.concurrency, limit=a.limit, extra=extra,
            )  # fmt: skip
    print_paired(
        {NAMES[cond]: load(a.out / cond) for cond in CONDITIONS},
        f"{a.tier}, {a.split}, model {a.model}",
    )


if __name__ == "__main__":
    main()
