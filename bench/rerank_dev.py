"""Compare re-rankers on the dev packages, the way their settings are chosen (issue 13, part 3).

For a seeded sample of a data set's queries (``cheetah search dataset`` over the dev
packages), the hybrid (trained embedder + BM25) takes its best ``k`` candidates; each
re-ranker given scores them. Printed per re-ranker, in the same run: MRR@10 of the trained
embedder alone and of the hybrid (the baselines), of the re-ranker's score alone over the
best ``k``, fused with the shipped ``RERANK_WEIGHTS``, and fused with the best weights of a
grid (chosen on this sample: an upper bound, not a held-out figure).

    cheetah search dataset --package networkx fsspec huggingface_hub tqdm filelock h11 \\
        httpcore pluggy sortedcontainers typer --max-queries 200 --out dev.jsonl
    python bench/rerank_dev.py --dataset dev.jsonl --reranker default /path/to/other

Left out: timing (``bench/search.py`` measures speed) and the held-out packages (reported
once, by ``cheetah search eval``, never used to choose).
"""

from __future__ import annotations

import argparse
import itertools
import random
from pathlib import Path

import numpy as np

from cheetah.progress import Pace
from cheetah.search.dataset import read_rows
from cheetah.search.embedder import load_embedder
from cheetah.search.fusion import fuse, zscores
from cheetah.search.index import embed_in_slices
from cheetah.search.lexical import BM25
from cheetah.search.rerank import RERANK_WEIGHTS, load_reranker


def reciprocal_rank(scores: np.ndarray, gold: int) -> float:
    """1/rank of ``gold`` under ``scores`` (ties count against it), 0 past rank 10."""
    rank = int((scores >= scores[gold]).sum())
    return 1.0 / rank if rank <= 10 else 0.0


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
    embedder = load_embedder("default")
    docs = embed_in_slices(embedder, codes, print)
    dense = embed_in_slices(embedder, [q for _, q in asked], print) @ docs.T
    bm25 = BM25(codes)
    lexical = np.stack([bm25.scores(q) for _, q in asked])
    hybrid = fuse(dense, lexical)
    tops = [np.argsort(-h)[: args.k] for h in hybrid]
    print(f"{len(asked)} queries, {len(codes)} candidates, best {args.k} re-ranked")
    alone = np.mean([reciprocal_rank(d, g) for d, (g, _) in zip(dense, asked, strict=True)])
    both = np.mean([reciprocal_rank(h, g) for h, (g, _) in zip(hybrid, asked, strict=True)])
    print(f"trained embedder alone MRR@10 {alone:.4f}; hybrid MRR@10 {both:.4f}")
    steps = itertools.product(np.arange(0.3, 0.95, 0.05), np.arange(0, 0.45, 0.05))
    grid = [
        (float(round(a, 2)), float(round(b, 2)), float(round(1 - a - b, 2)))
        for a, b in steps
        if a + b <= 1 + 1e-9
    ]
    for spec in args.reranker:
        model, pace = load_reranker(spec), Pace()
        feats = []  # per query: (re-ranker, BM25, cosine) z-scores over its best k, gold's place
        for n, ((gold, query), top) in enumerate(zip(asked, tops, strict=True)):
            scores = model.score(query, [codes[i] for i in top])
            where = np.flatnonzero(top == gold)
            feats.append((zscores(scores), zscores(lexical[n][top]), zscores(dense[n][top]), where))
            if pace.due(final=n + 1 == len(asked)):
                print(f"{model.name}: {n + 1}/{len(asked)} queries re-ranked", flush=True)
        best = max(grid, key=lambda w: fused_mrr(feats, w))
        print(f"{model.name}: alone MRR@10 {fused_mrr(feats, (1.0, 0.0, 0.0)):.4f}; fused "
              f"{RERANK_WEIGHTS} {fused_mrr(feats, RERANK_WEIGHTS):.4f}; best grid weights "
              f"{best} {fused_mrr(feats, best):.4f}")  # fmt: skip


def fused_mrr(feats: list, weights: tuple[float, float, float]) -> float:
    """MRR@10 within each query's best k when ranked by ``weights`` . (re-ranker, BM25,
    cosine) z-scores; a query whose answer is not among them counts 0."""
    total = 0.0
    for rerank, lexical, dense, where in feats:
        if len(where):
            fused = weights[0] * rerank + weights[1] * lexical + weights[2] * dense
            total += reciprocal_rank(fused, int(where[0]))
    return total / max(1, len(feats))


if __name__ == "__main__":
    main()
