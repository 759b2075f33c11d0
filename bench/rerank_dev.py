"""Compare re-rankers on the dev packages, the way their settings are chosen (issue 13, part 3).

For a seeded sample of a data set's queries (``cheetah search dataset`` over the dev
packages), the hybrid (trained embedder + BM25) takes its best ``k`` candidates; each
re-ranker given scores them. Printed per re-ranker, in the same run: MRR@10 of the trained
embedder alone and of the hybrid (the baselines), of the re-ranker's score alone over the
best ``k``, fused with the shipped ``RERANK_WEIGHTS``, and fused with the best weights of a
grid (chosen on this sample: an upper bound, not a held-out figure).

The shipped re-ranker (``default``) has trained on the dev packages since 2026-12-02, so
its figures here are training figures; compare re-rankers trained on the training packages
only (``cheetah search train-reranker`` without ``--package``), as in BENCHMARKS.md.

    cheetah search dataset --package networkx fsspec huggingface_hub tqdm filelock h11 \\
        httpcore pluggy sortedcontainers typer --max-queries 200 --out dev.jsonl
    python bench/rerank_dev.py --dataset dev.jsonl --reranker default /path/to/other

Left out: timing (``bench/search.py`` measures speed) and the held-out packages (reported
once, by ``cheetah search eval``, never used to choose).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
from pathlib import Path

import numpy as np

from cheetah.progress import Pace
from cheetah.search.dataset import read_rows
from cheetah.search.embedder import load_embedder
from cheetah.search.fusion import fuse
from cheetah.search.index import embed_in_slices
from cheetah.search.lexical import BM25
from cheetah.search.ranking_eval import ranks, summarize
from cheetah.search.rerank import RERANK_WEIGHTS, Reranker, load_reranker, rerank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--dataset", type=Path, required=True, help="JSONL from `cheetah search dataset`"
    )
    ap.add_argument("--reranker", nargs="+", default=["default"], help="'default' or directories")
    ap.add_argument("--queries", type=int, default=300, help="seeded sample size (0: all)")
    ap.add_argument("--k", type=int, default=20, help="hybrid candidates re-ranked per query")
    args = ap.parse_args()

    rows = read_rows(args.dataset)
    codes = [r.code for r in rows]
    asked = [(i, r.query) for i, r in enumerate(rows) if r.query]
    if args.queries and args.queries < len(asked):
        asked = sorted(random.Random(0).sample(asked, args.queries))
    gold = np.array([i for i, _ in asked])
    embedder = load_embedder("default")
    docs = embed_in_slices(embedder, codes, print)
    dense = embed_in_slices(embedder, [q for _, q in asked], print) @ docs.T
    bm25 = BM25(codes)
    lexical = np.stack([bm25.scores(q) for _, q in asked])
    hybrid = fuse(dense, lexical)  # the first stage of codebase_search and `search eval`
    print(f"{len(asked)} queries, {len(codes)} candidates, best {args.k} re-ranked")
    for name, scores in (("trained embedder alone", dense), ("hybrid", hybrid)):
        print(f"{name}: MRR@10 {summarize(name, ranks(scores, gold), len(codes)).mrr_at_10:.4f}")
    steps = itertools.product(np.arange(0.3, 0.95, 0.05), np.arange(0, 0.45, 0.05))
    grid = [
        (float(round(a, 2)), float(round(b, 2)), float(round(1 - a - b, 2)))
        for a, b in steps
        if a + b <= 1 + 1e-9
    ]
    for spec in args.reranker:
        model, pace = load_reranker(spec), Pace()
        scorers = []
        for n, (_, query) in enumerate(asked):
            scorers.append(_Cached(model, query, codes))
            rerank(hybrid[n], scorers[-1], args.k, dense[n], lexical[n])  # reads the model once
            if pace.due(final=n + 1 == len(asked)):
                print(f"{model.name}: {n + 1}/{len(asked)} queries re-ranked", flush=True)

        mrr = functools.partial(fused_mrr, hybrid, scorers, dense, lexical, gold, args.k)
        best = max(grid, key=mrr)
        print(f"{model.name}: alone MRR@10 {mrr((1.0, 0.0, 0.0)):.4f}; fused {RERANK_WEIGHTS} "
              f"{mrr(RERANK_WEIGHTS):.4f}; best grid weights {best} {mrr(best):.4f}")  # fmt: skip


def fused_mrr(first, scorers, dense, lexical, gold, k: int, weights) -> float:
    """MRR@10 when ``search.rerank.rerank`` orders each query's candidates with ``weights``
    (the re-ranker's scores from ``scorers``, read once and cached)."""
    fused = np.stack(
        [
            rerank(h, s, k, d, x, weights)
            for h, s, d, x in zip(first, scorers, dense, lexical, strict=True)
        ]
    )
    return summarize("fused", ranks(fused, gold), fused.shape[1]).mrr_at_10


class _Cached:
    """``rerank``'s scorer for one query: the re-ranker reads each candidate once."""

    def __init__(self, model: Reranker, query: str, codes: list[str]) -> None:
        self.model, self.query, self.codes, self.seen = model, query, codes, {}

    def __call__(self, top: list[int]) -> np.ndarray:
        new = [int(i) for i in top if int(i) not in self.seen]
        if new:
            scores = self.model.score(self.query, [self.codes[i] for i in new])
            self.seen.update(zip(new, (float(v) for v in scores), strict=True))
        return np.array([self.seen[int(i)] for i in top])


if __name__ == "__main__":
    main()
