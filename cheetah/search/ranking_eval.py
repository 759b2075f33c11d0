"""Rank every candidate for every query of a data set, per method: R@1, R@10, MRR@10.

Methods: ``bm25`` (keyword search on split identifiers, ``lexical.py``), each embedder
(cosine similarity of ``Embedder.embed`` vectors), and for each embedder a hybrid with
BM25. The hybrid's fusion is a convex combination of the two methods' scores after
z-normalizing each over the candidates of the query (``fusion.fuse``): unlike reciprocal-rank
fusion it keeps how far ahead a method's top candidate is (a keyword match on a rare
identifier is strong evidence, a dense near-tie is not), and the z-scores make BM25's
unbounded scores and cosine similarities comparable. The weight (``DENSE_WEIGHT``) was
chosen on the development packages (``search/pairs.py``; 1,125 queries over 9,889 chunks),
never on a test set, for the embedder ``codebase_search`` uses by default: with it (MRR@10
0.471 alone) and ``BM25`` (0.350 alone), weights 0.5/0.6/0.7/0.8/0.9 gave
0.430/0.450/0.468/0.476/0.487 and reciprocal-rank fusion 0.446 (k=10), 0.434 (k=60); with
the stock embedder (0.374 alone) 0.409/0.419/0.427/0.430/0.413, and RRF 0.412/0.404.

A query's rank is pessimistic under ties: every candidate scoring at least as high as the
right one ranks before it, so a method that scores everything zero gets no credit.

How sure a difference is (``paired_bootstrap``): every method ranks the same queries, so the
best method is compared with each other one query by query. The mean of the per-query
differences in reciprocal rank (MRR@10's difference) gets a 95% percentile interval from
resampling the queries with replacement, both methods' values together; that keeps the
correlation between them, which makes it far narrower than two separate intervals would
suggest. It is an interval over the choice of queries, not over training runs.

With a re-ranker (``search/rerank.py``), one more method: the cross-encoder re-scores the
``RERANK_K`` best candidates of the last embedder's hybrid (the embedder listed last is the
one being judged), fused with BM25's and the cosine's scores of those candidates
(``RERANK_WEIGHTS``, chosen on the development packages).

Deliberately left out: approximate search (exact scores here; ``bench/`` measures speed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cheetah.inference.protocol import Embedder
from cheetah.search.dataset import Row
from cheetah.search.fusion import DENSE_WEIGHT, fuse
from cheetah.search.index import embed_in_slices
from cheetah.search.lexical import BM25
from cheetah.search.rerank import RERANK_K, RERANK_WEIGHTS, Reranker, rerank

BLOCK = 64  # queries scored at once (a BLOCK x candidates matrix; a progress line each)
BOOTSTRAP = 2000  # resamples of the queries for a paired difference's interval


@dataclass
class MethodResult:
    method: str
    queries: int
    candidates: int
    r_at_1: float
    r_at_10: float
    mrr_at_10: float
    reciprocal: np.ndarray = field(repr=False, compare=False)  # per query, 0 past rank 10

    def as_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "reciprocal"}


def ranks(scores: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """1-based rank of ``gold[i]`` in row ``i``; ties count against it (pure)."""
    right = scores[np.arange(len(gold)), gold][:, None]
    return (scores >= right).sum(axis=1)


def summarize(method: str, r: np.ndarray, candidates: int) -> MethodResult:
    reciprocal = np.where((r >= 1) & (r <= 10), 1.0 / np.maximum(r, 1), 0.0)  # 1/0 never taken
    return MethodResult(
        method=method,
        queries=len(r),
        candidates=candidates,
        r_at_1=float(np.mean(r <= 1)),
        r_at_10=float(np.mean(r <= 10)),
        mrr_at_10=float(np.mean(reciprocal)),
        reciprocal=reciprocal,
    )


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, samples: int = BOOTSTRAP, seed: int = 0
) -> tuple[float, float, float]:
    """``mean(a - b)`` over paired per-query values and its 95% percentile interval from
    ``samples`` resamples of the queries (pure; ``seed`` fixes the resamples)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two non-empty 1-d arrays of one length, "
                         f"got shapes {a.shape} and {b.shape}")  # fmt: skip
    d = a - b
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    chunk = max(1, 2_000_000 // d.size)  # bounded memory on large data sets
    for lo in range(0, samples, chunk):
        n = min(chunk, samples - lo)
        means[lo : lo + n] = d[rng.integers(0, d.size, size=(n, d.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(low), float(high)


def evaluate_rows(
    rows: Sequence[Row],
    embedders: Sequence[Embedder],
    weight: float = DENSE_WEIGHT,
    log: Callable[[str], None] = lambda _: None,
    reranker: Reranker | None = None,
    rerank_weights: tuple[float, float, float] = RERANK_WEIGHTS,
) -> list[MethodResult]:
    """Every method on ``rows``: BM25, each embedder, each embedder's hybrid with BM25, and
    (``reranker``) the last hybrid re-ranked."""
    codes = [r.code for r in rows]
    asked = [(i, r.query) for i, r in enumerate(rows) if r.query]
    gold = np.array([i for i, _ in asked])
    queries = [q for _, q in asked]
    log(f"{len(queries)} queries over {len(codes)} candidates")
    bm25 = BM25(codes)
    lexical_ranks, dense_ranks, hybrid_ranks, reranked = [], {}, {}, []
    vectors = {
        e.name: (embed_in_slices(e, codes, log), embed_in_slices(e, queries, log))
        for e in embedders
    }
    for lo in range(0, len(queries), BLOCK):
        block = slice(lo, lo + BLOCK)
        lex = np.stack([bm25.scores(q) for q in queries[block]])
        lexical_ranks.append(ranks(lex, gold[block]))
        for name, (docs, qv) in vectors.items():
            dense = qv[block] @ docs.T
            dense_ranks.setdefault(name, []).append(ranks(dense, gold[block]))
            hybrid = fuse(dense, lex, weight)
            hybrid_ranks.setdefault(name, []).append(ranks(hybrid, gold[block]))
        if reranker is not None and vectors:  # ``hybrid`` is the last embedder's
            rescored = np.stack(
                [
                    rerank(h, _scorer(reranker, q, codes), RERANK_K, d, x, rerank_weights)
                    for h, q, d, x in zip(hybrid, queries[block], dense, lex, strict=True)
                ]
            )
            reranked.append(ranks(rescored, gold[block]))
            log(f"{reranker.name}: {lo + len(rescored)}/{len(queries)} queries re-ranked")
    n = len(codes)
    out = [summarize("bm25", np.concatenate(lexical_ranks), n)]
    for name in vectors:
        out.append(summarize(name, np.concatenate(dense_ranks[name]), n))
        out.append(summarize(f"hybrid(bm25+{name})", np.concatenate(hybrid_ranks[name]), n))
    if reranked:
        last = list(vectors)[-1]
        out.append(summarize(f"{reranker.name}(hybrid(bm25+{last}))", np.concatenate(reranked), n))
    return out


def _scorer(reranker: Reranker, query: str, codes: list[str]) -> Callable[[list[int]], np.ndarray]:
    return lambda top: reranker.score(query, [codes[i] for i in top])
