"""Semantic search: incremental indexing against a full re-index, and retrieval of the
fine-tuned embedder against the base model, each compared in the same run.

1. Indexing: a copy of a source tree (default: this project's ``cheetah`` package) is
   indexed from scratch, then one file is edited and the index updated; the figure is
   the ratio of the two wall times (median of ``--repeat``), with the files embedded.
2. Retrieval: ``cheetah search train``'s measurement: recall@1/@5 and MRR on held-out
   standard-library docstrings and held-out benchmark tasks, base model vs the model
   fine-tuned in this run (``--steps`` steps, 0 to skip).

    python bench/search.py [--tree cheetah] [--repeat 3] [--steps 40] [--out /tmp/emb]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_index(tree: Path, repeat: int) -> None:
    from cheetah.search.embedder import load_embedder
    from cheetah.search.index import CodeIndex

    emb = load_embedder()
    full, incr = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "repo"
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
            index = CodeIndex(copy, emb)
            t0 = time.perf_counter()
            first = index.update()
            full.append(time.perf_counter() - t0)
            victim = sorted(copy.rglob("*.py"))[0]
            victim.write_text(victim.read_text() + "\n\ndef added_for_bench():\n    return 1\n")
            t0 = time.perf_counter()
            second = index.update()
            incr.append(time.perf_counter() - t0)
    f, i = statistics.median(full), statistics.median(incr)
    print(f"index {tree}: {first.files} files, {first.chunks_embedded} chunks")
    print(f"  full index      median {f:7.2f} s  (n={repeat})")
    print(
        f"  after one edit  median {i:7.3f} s  ({len(second.changed)} file, "
        f"{second.chunks_embedded} chunks re-embedded)"
    )
    print(f"  incremental is {f / i:.0f}x faster than a full re-index")


def bench_retrieval(steps: int, out: Path) -> None:
    from cheetah.search.train import train_embedder
    from cheetah.search.train_config import EmbedderTrainConfig

    figures = train_embedder(
        "default", out, Path("benchmark"), EmbedderTrainConfig(max_steps=steps)
    )
    print(
        f"retrieval: {figures['pairs']} training pairs, {figures['steps']} steps in "
        f"{figures['train_s']:.0f} s, loss {figures['first_loss']:.3f} -> {figures['last_loss']:.3f}"
    )
    print(f"  {'corpus':<16} {'queries':>7} {'R@1 base':>9} {'R@1 tuned':>9} {'R@5 base':>9} "
          f"{'R@5 tuned':>9} {'MRR base':>9} {'MRR tuned':>9}")  # fmt: skip
    for b, a in zip(figures["before"], figures["after"], strict=True):
        print(
            f"  {b['corpus']:<16} {b['queries']:>7} {b['recall_at_1']:>9.3f} "
            f"{a['recall_at_1']:>9.3f} {b['recall_at_5']:>9.3f} {a['recall_at_5']:>9.3f} "
            f"{b['mrr']:>9.3f} {a['mrr']:>9.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=ROOT / "cheetah")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="fine-tuning steps (0: skip)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "cheetah-embedder")
    args = ap.parse_args()
    bench_index(args.tree, args.repeat)
    if args.steps:
        bench_retrieval(args.steps, args.out)


if __name__ == "__main__":
    main()
