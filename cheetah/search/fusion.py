"""Combining two rankers' scores: z-scores per query, then a convex combination (pure).

Used by the hybrid of keyword and dense search (``evaluate.py``, ``index.py``) and by the
re-ranker's fusion with the first stage (``rerank.py``). Unlike reciprocal-rank fusion it
keeps how far ahead a method's top candidate is, and z-scores make unbounded BM25 scores,
cosine similarities and a cross-encoder's logits comparable.
"""

from __future__ import annotations

import numpy as np

DENSE_WEIGHT = 0.9  # of the dense half in the hybrid with BM25 (see evaluate.py for how chosen)


def zscores(scores: np.ndarray) -> np.ndarray:
    """Per row: (scores - mean) / std; a row with no spread becomes zeros."""
    scores = np.asarray(scores, dtype=np.float64)
    mean = scores.mean(axis=-1, keepdims=True)
    std = scores.std(axis=-1, keepdims=True)
    return np.where(std > 0, (scores - mean) / np.where(std > 0, std, 1), 0.0)


def fuse(dense: np.ndarray, lexical: np.ndarray, weight: float = DENSE_WEIGHT) -> np.ndarray:
    """Hybrid scores: ``weight`` * z(dense) + (1 - weight) * z(lexical), row by row."""
    return weight * zscores(dense) + (1 - weight) * zscores(lexical)
