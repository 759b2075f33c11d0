"""Fine-tune the embedder on (query, code) pairs, and measure retrieval before and after.

Training is contrastive with in-batch negatives (InfoNCE): in a batch of B pairs,
each query must score its own code above the other B - 1, through a cross-entropy
over the B x B similarity matrix divided by a temperature. Plain PyTorch on the same
``TransformerEmbedder`` that serves, so what is measured is what the tool uses; the
result is saved as an HF directory that ``load_embedder(PATH)`` and
``CHEETAH_EMBEDDER=PATH`` take.

Evaluation ranks every chunk of a held-out corpus for each query: recall@1, recall@5
and mean reciprocal rank. Deliberately left out: hard-negative mining, multi-GPU.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cheetah.search.embedder import TransformerEmbedder
from cheetah.search.pairs import Corpus, Pair


@dataclass
class TrainConfig:
    epochs: int = 1
    batch_size: int = 32
    lr: float = 3e-5
    temperature: float = 0.05
    max_steps: int = 0  # 0: all batches of all epochs
    seed: int = 0


def info_nce(q, c, temperature: float):
    """Cross-entropy of each query against every code in the batch (pure; both normalized)."""
    import torch

    logits = q @ c.T / temperature
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(q)))


def finetune(
    embedder: TransformerEmbedder,
    pairs: list[Pair],
    cfg: TrainConfig,
    on_step: Callable[[int, int, float], None] | None = None,
) -> list[float]:
    """Train ``embedder.model`` in place; returns the loss of every step."""
    import torch

    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    batches = []
    for _ in range(cfg.epochs):
        order = list(pairs)
        rng.shuffle(order)
        batches += [order[i : i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
    batches = [b for b in batches if len(b) > 1]
    if cfg.max_steps:
        batches = batches[: cfg.max_steps]
    model = embedder.model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    total = len(batches)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, total // 10)) * max(0.0, 1 - s / max(1, total))
    )
    model.train()
    losses = []
    try:
        for step, batch in enumerate(batches, 1):
            q = embedder.encode([p.query for p in batch])
            c = embedder.encode([p.positive.embed_text for p in batch])
            loss = info_nce(q, c, cfg.temperature)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if on_step:
                on_step(step, total, losses[-1])
    finally:
        model.eval()
    return losses


def save(embedder: TransformerEmbedder, out: Path, info: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    embedder.model.save_pretrained(out)
    embedder.tokenizer.save_pretrained(out)
    (out / "cheetah_embedder.json").write_text(json.dumps(info, indent=1))
    return out


@dataclass
class Retrieval:
    corpus: str
    queries: int
    recall_at_1: float
    recall_at_5: float
    mrr: float


def evaluate(embedder: TransformerEmbedder, corpora: list[Corpus]) -> list[Retrieval]:
    """Recall@1, recall@5 and MRR per corpus name (corpora of one name are pooled)."""
    ranks: dict[str, list[int]] = {}
    for corpus in corpora:
        if not corpus.queries or not corpus.chunks:
            continue
        keys = [(c.path, c.start) for c in corpus.chunks]
        docs = embedder.embed([c.embed_text for c in corpus.chunks])
        qv = embedder.embed([q for q, _ in corpus.queries])
        scores = qv @ docs.T
        for row, (_, good) in zip(scores, corpus.queries, strict=True):
            order = np.argsort(-row)
            rank = next(i for i, j in enumerate(order, 1) if keys[j] in good)
            ranks.setdefault(corpus.name, []).append(rank)
    return [
        Retrieval(
            corpus=name,
            queries=len(r),
            recall_at_1=sum(x <= 1 for x in r) / len(r),
            recall_at_5=sum(x <= 5 for x in r) / len(r),
            mrr=sum(1 / x for x in r) / len(r),
        )
        for name, r in sorted(ranks.items())
    ]


def train_embedder(
    base: str,
    out: Path,
    tasks_file: Path | None,
    cfg: TrainConfig,
    log: Callable[[str], None] = print,
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict:
    """Measure ``base``, fine-tune it, measure again, save it to ``out``; returns the figures."""
    from cheetah.search.embedder import default_model_dir
    from cheetah.search.pairs import eval_corpora, training_pairs

    model_dir = default_model_dir() if base == "default" else Path(base)
    embedder = TransformerEmbedder(model_dir, name=f"cheetah-finetuned:{out.name}")
    pairs = training_pairs(tasks_file, cfg.seed)
    corpora = eval_corpora(tasks_file)
    log(
        f"{len(pairs)} training pairs; evaluating on {sum(len(c.queries) for c in corpora)} queries"
    )
    before = evaluate(embedder, corpora)
    t0 = time.perf_counter()
    losses = finetune(embedder, pairs, cfg, on_step)
    train_s = time.perf_counter() - t0
    after = evaluate(embedder, corpora)
    figures = {
        "base": base,
        "pairs": len(pairs),
        "steps": len(losses),
        "first_loss": losses[0] if losses else math.nan,
        "last_loss": float(np.mean(losses[-10:])) if losses else math.nan,
        "train_s": train_s,
        "before": [r.__dict__ for r in before],
        "after": [r.__dict__ for r in after],
        "config": cfg.__dict__,
    }
    save(embedder, out, figures)
    return figures
