"""A cross-encoder that re-ranks the first stage's best candidates, and how it is trained.

The embedder scores a query and a chunk apart (two vectors, one dot product), which is what
makes search over 100k chunks take milliseconds, but it never sees the two texts together.
The re-ranker reads ``[CLS] query [SEP] code [SEP]`` in one pass of the same six-layer
MiniLM (the project's trained embedder, merged), so every layer lets the query's tokens and
the code's attend to each other. Its score is the scaled cosine of the query's tokens and
the code's, mean-pooled apart after that joint pass, plus a linear head over the whole
pair; the head starts at zero and the cosine at the embedder's own scale, so training
starts from a ranking and not from noise (a head alone over a pooled pair barely moved in
the first 50 steps). It runs only on the first stage's top ``k`` candidates
(``RERANK_K``): 20 forward passes a query instead of one per chunk.

What ships is small: a LoRA adapter over the trained embedder's weights plus the head and
the scale (``cheetah/data/reranker``, float16), merged into a plain model when it loads.

Training (``train_reranker``): groups of one query, its right code and ``negatives`` wrong
ones from the same source (a function of the same file, and the best matches of the
first stage that serves: the trained embedder's cosine + BM25 hybrid over a pool of the
source's chunks, ``mine_groups``), a cross-entropy over each group's scores (listwise
softmax). Pairs come by default from the training packages and standard-library modules of
``search/pairs.py``: the dev packages choose settings, the held-out packages are reported,
``dataset.RESERVED`` is never read. ``init`` trains a saved re-ranker further (how the
shipped one was made is in BENCHMARKS.md).

Deliberately left out: embedding every chunk of a training package for mining (torch and
transformers alone would cost more CPU time than the training; a pool of 1,000 chunks a
source is mined instead), distillation from a larger model (none ships here that is fast
enough to label the groups on a CPU), and scoring more than one query per forward pass.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cheetah.inference.protocol import Embedder, Reranker
from cheetah.progress import Pace
from cheetah.search.fusion import fuse, zscores
from cheetah.search.pairs import Pair
from cheetah.search.train_config import RerankerTrainConfig

__all__ = ["CrossEncoder", "Reranker", "load_reranker", "rerank", "train_reranker"]

RERANK_K = 20  # first-stage candidates the re-ranker reads per query
# Within those k: weights of the re-ranker's, BM25's and the cosine's z-scores, chosen on the
# development packages for the 900-step re-ranker (300 queries: 0.545; its score alone:
# 0.493) and kept for the shipped one trained on from it (dev is in that one's data).
RERANK_WEIGHTS = (0.7, 0.2, 0.1)
MAX_TOKENS = 256  # query and code together, as the model reads them
SCALE = 20.0  # initial scale of the cosine (the embedder trained at temperature 0.05)
INFO = "cheetah_reranker.json"
HEAD = "head.safetensors"
MINING_POOL = 1000  # chunks per source the hybrid mines negatives from (see mine_groups)


class RerankerUnavailable(RuntimeError):
    """The re-ranker cannot be loaded (no such directory, missing files), or its service
    cannot be reached."""


class CrossEncoder:
    """Scores (query, code) pairs read together; higher is more relevant."""

    def __init__(
        self, model_dir: str | Path | None = None, name: str | None = None, trainable: bool = False
    ) -> None:
        """``model_dir`` written by ``save`` (``None``: a fresh head over the trained
        embedder, the starting point of training). ``trainable`` keeps its adapter apart
        (not merged) so that training goes on from it."""
        import torch

        from cheetah import bundled
        from cheetah.search.embedder import TransformerEmbedder

        self.model_dir = Path(model_dir) if model_dir is not None else None
        info = {}
        if self.model_dir is not None:
            if not (self.model_dir / INFO).is_file():
                raise RerankerUnavailable(f"{self.model_dir}: no re-ranker here (no {INFO})")
            info = json.loads((self.model_dir / INFO).read_text())
        base = info.get("embedder", "default")  # never the cached one codebase_search holds
        encoder = TransformerEmbedder(bundled.EMBEDDER if base == "default" else Path(base))
        self.tokenizer, self.model = encoder.tokenizer, encoder.model
        self.max_tokens = int(info.get("max_tokens", MAX_TOKENS))
        self.head = torch.nn.Linear(self.model.config.hidden_size, 1)
        self.scale = torch.nn.Parameter(torch.tensor(SCALE))
        if self.model_dir is not None:
            from peft import PeftModel
            from safetensors.torch import load_file

            self.model = PeftModel.from_pretrained(
                self.model, self.model_dir, is_trainable=trainable
            )
            if not trainable:
                self.model = self.model.merge_and_unload()
            state = load_file(self.model_dir / HEAD)
            self.scale.data.fill_(float(state.pop("scale")))
            self.head.load_state_dict({k: v.float() for k, v in state.items()})
        else:
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)
        self.model.eval()
        self.name = name or (self.model_dir.name if self.model_dir else "reranker")
        self._lock = threading.Lock()  # one forward at a time: torch already uses every core

    def forward(self, queries: list[str], codes: list[str]):
        """One score per (query, code) pair, as a torch tensor (with gradients in training):
        the scaled cosine of the query's and the code's tokens mean-pooled apart after the
        joint pass (what the embedder was trained to compare, so training starts from its
        ranking), plus the head's reading of the whole pair (zero at the start)."""
        import torch

        from cheetah.search.embedder import clip

        batch = self.tokenizer(
            clip(self.tokenizer, queries, self.max_tokens),  # memory bounded by the window
            clip(self.tokenizer, codes, self.max_tokens),
            padding=True,
            truncation="longest_first",  # a long query is cut too, never refused
            max_length=self.max_tokens,
            return_tensors="pt",
        )
        out = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
        second = batch["token_type_ids"].unsqueeze(-1).to(out.dtype) * mask
        first = mask - second

        def pool(m):
            return torch.nn.functional.normalize(
                (out * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1
            )

        q, c = pool(first), pool(second)
        whole = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return self.scale * (q * c).sum(-1) + self.head(whole).squeeze(-1)

    @property
    def lora_rank(self) -> int | None:
        """The rank of the adapter kept apart (``trainable``); None once it is merged."""
        config = getattr(self.model, "peft_config", None)
        return int(config["default"].r) if config else None

    def score(self, query: str, codes: list[str], batch_size: int = 32) -> np.ndarray:
        """Scores of ``codes`` for ``query`` (float32, one per code, in order)."""
        import torch

        out = np.zeros(len(codes), dtype=np.float32)
        order = sorted(range(len(codes)), key=lambda i: len(codes[i]))
        with self._lock, torch.inference_mode():
            for lo in range(0, len(order), batch_size):
                rows = order[lo : lo + batch_size]
                out[rows] = self.forward([query] * len(rows), [codes[j] for j in rows]).numpy()
        return out


def load_reranker(spec: str = "default") -> Reranker:
    """``default`` (the shipped one), a directory written by ``cheetah search
    train-reranker``, or the URL of a re-rank service (``http://host:port/v1``)."""
    if spec.startswith(("http://", "https://")):
        from cheetah.search.remote_reranker import RemoteReranker

        return RemoteReranker(spec)
    return CrossEncoder(reranker_dir(spec), name=shipped_name() if spec == "default" else None)


def reranker_dir(spec: str) -> Path:
    """Where the re-ranker ``spec`` lives: ``default`` is the shipped one."""
    from cheetah import bundled

    return bundled.RERANKER if spec == "default" else Path(spec)


def shipped_name() -> str:
    import hashlib

    from cheetah import bundled

    digest = hashlib.sha256((bundled.RERANKER / "adapter_model.safetensors").read_bytes())
    return f"cheetah-code-reranker-{digest.hexdigest()[:8]}"


def rerank(
    first: np.ndarray,
    scores: Callable[[list[int]], np.ndarray],
    k: int,
    dense: np.ndarray,
    lexical: np.ndarray,
    weights: tuple[float, float, float] = RERANK_WEIGHTS,
) -> np.ndarray:
    """Final scores of one query's candidates. The first stage's (``first``, the hybrid)
    ``k`` best are ordered by ``weights`` . (z(re-ranker), z(BM25), z(cosine)), z over those
    ``k``, and placed above every other candidate, which keeps its first-stage score.
    ``scores(indices)`` gives the re-ranker's scores for those candidates; ``dense`` and
    ``lexical`` hold every candidate's cosine and BM25 scores (finite scores only)."""
    if len(first) == 0:
        return first.astype(np.float64)
    top = np.argpartition(-first, k - 1)[:k] if len(first) > k else np.arange(len(first))
    w_rerank, w_lexical, w_dense = weights
    fused = (
        w_rerank * zscores(scores(list(top)))
        + w_lexical * zscores(lexical[top])
        + w_dense * zscores(dense[top])
    )
    out = first.astype(np.float64).copy()
    rest = np.delete(out, top)
    floor = (rest.max() + 1.0) if len(rest) else 0.0
    out[top] = floor + fused - fused.min()
    return out


# --- training ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    query: str
    codes: tuple[str, ...]  # the right code first


def listwise_loss(scores, group_size: int):
    """Cross-entropy of each group's scores with its first code as the answer (pure)."""
    import torch

    logits = scores.view(-1, group_size)
    return torch.nn.functional.cross_entropy(
        logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device)
    )


def mine_groups(
    pairs_by_source: dict[str, tuple[list[Pair], list[str]]],
    negatives: int,
    seed: int,
    embedder: Embedder | None = None,
    pool: int = MINING_POOL,
    log: Callable[[str], None] = print,
) -> list[Group]:
    """One group per pair: its code, then up to ``negatives`` wrong codes: the pair's
    same-file negative and the first stage's best matches for the query within its source
    (pairs with too few are dropped). ``pairs_by_source``: name -> (pairs, every chunk text
    of that source).

    Without ``embedder`` the first stage is BM25 over every chunk of the source. With it,
    it is the cosine + BM25 hybrid that ``codebase_search`` runs (``fusion.fuse``), over a
    pool of at most ``pool`` chunks of the source: the codes of its pairs, then a seeded
    sample of the rest (embedding every chunk of torch would cost more than the training).
    The hybrid's confusers are what the re-ranker meets when it serves."""
    from cheetah.search.lexical import BM25

    rng = random.Random(seed)
    out: list[Group] = []
    for name, (pairs, texts) in pairs_by_source.items():
        if not pairs or len(texts) <= negatives:
            continue
        if embedder is not None:
            texts = _pool(pairs, texts, pool, random.Random(f"{seed}:{name}"))
        bm25 = BM25(texts)
        lexical = np.stack([bm25.scores(p.query) for p in pairs])
        if embedder is None:
            first = lexical
        else:
            log(f"mining {name}: embedding {len(texts)} chunks and {len(pairs)} queries")
            dense = embedder.embed([p.query for p in pairs]) @ embedder.embed(texts).T
            first = fuse(dense, lexical)
        for p, scores in zip(pairs, first, strict=True):
            right = p.positive.text
            wrong: list[str] = [p.negative.text] if p.negative is not None else []
            for i in np.argsort(-scores)[: 3 * negatives]:
                if texts[i].strip() != right.strip() and texts[i] not in wrong:
                    wrong.append(texts[i])
            head, rest = wrong[: negatives // 2 + 1], wrong[negatives // 2 + 1 :]
            rng.shuffle(rest)
            wrong = (head + rest)[:negatives]
            if len(wrong) == negatives:
                out.append(Group(p.query, (right, *wrong)))
    rng.shuffle(out)
    return out


def _pool(pairs: list[Pair], texts: list[str], size: int, rng: random.Random) -> list[str]:
    """The pairs' codes, then distinct other chunks of the source at random: ``size`` in all
    and at least three chunks a pair (or every chunk, when there are fewer)."""
    chosen = list(dict.fromkeys(p.positive.text for p in pairs))
    taken = set(chosen)
    rest = [t for t in dict.fromkeys(texts) if t not in taken]
    rng.shuffle(rest)
    return chosen + rest[: max(size, 3 * len(chosen)) - len(chosen)]


def training_groups(
    cfg: RerankerTrainConfig,
    per_source: int = 300,
    log: Callable[[str], None] = print,
    packages: tuple[str, ...] | None = None,
    embedder: Embedder | None = None,
) -> list[Group]:
    """Groups from standard-library modules and ``packages`` (default: the training
    packages of ``search/pairs.py``), negatives mined by ``mine_groups`` (with the hybrid
    of ``embedder`` and BM25 when one is given)."""
    from cheetah.search.dataset import package_pairs
    from cheetah.search.pairs import (
        TRAIN_MODULES,
        TRAIN_PACKAGES,
        docstring_corpus,
        stdlib_files,
        with_negatives,
    )

    sources: dict[str, tuple[list[Pair], list[str]]] = {}
    pairs, corpus = docstring_corpus("train", stdlib_files(TRAIN_MODULES))
    pairs = with_negatives(pairs, corpus.chunks, cfg.seed)
    random.Random(cfg.seed).shuffle(pairs)
    sources["stdlib"] = (pairs[: 3 * per_source], [c.text for c in corpus.chunks])
    for name in TRAIN_PACKAGES if packages is None else packages:
        found, chunks = package_pairs(name)
        log(f"read {name}: {len(found)} pairs, {len(chunks)} chunks")
        if not found:
            continue
        ps = with_negatives([Pair(q, c) for q, c in found], chunks, cfg.seed)
        random.Random(f"{cfg.seed}:{name}").shuffle(ps)
        sources[name] = (ps[:per_source], [c.text for c in chunks])
    log(f"mining negatives for {sum(len(p) for p, _ in sources.values())} pairs")
    return mine_groups(sources, cfg.negatives, cfg.seed, embedder, log=log)


def train_reranker(
    groups: list[Group],
    cfg: RerankerTrainConfig,
    log: Callable[[str], None] = print,
    init: Path | None = None,
) -> tuple[CrossEncoder, list[float]]:
    """A ``CrossEncoder`` trained on ``groups``: a fresh one (LoRA over the trained
    embedder, new head), or with ``init`` the re-ranker saved there, its adapter, head and
    scale trained further (its rank is then the saved adapter's, not ``cfg.lora_rank``:
    see ``CrossEncoder.lora_rank``). Returns it and every step's loss."""
    import torch

    from cheetah.search.train import optimizer_step, warmup_then_linear, with_lora

    torch.manual_seed(cfg.seed)
    if init is not None:
        enc = CrossEncoder(init, trainable=True)
    else:
        enc = CrossEncoder()
        enc.model = with_lora(enc.model, cfg.lora_rank)
    params = [p for p in enc.model.parameters() if p.requires_grad]
    params += [*enc.head.parameters(), enc.scale]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    steps = min(cfg.steps, len(groups) // cfg.groups)
    sched = warmup_then_linear(opt, steps)
    size = cfg.negatives + 1
    enc.model.train()
    enc.max_tokens, serving = cfg.max_tokens, enc.max_tokens
    losses: list[float] = []
    pace, t0 = Pace(), time.perf_counter()
    try:
        for step in range(steps):
            batch = groups[step * cfg.groups : (step + 1) * cfg.groups]
            queries = [g.query for g in batch for _ in g.codes]
            codes = [c for g in batch for c in g.codes]
            loss = listwise_loss(enc.forward(queries, codes), size)
            losses.append(optimizer_step(loss, opt, sched, params))
            if pace.due(final=step + 1 == steps):
                recent = float(np.mean(losses[-20:]))
                log(f"step {step + 1}/{steps} loss {recent:.3f} ({time.perf_counter() - t0:.0f} s)")
    finally:
        enc.model.eval()
        enc.max_tokens = serving
    return enc, losses


def save(enc: CrossEncoder, out: Path, info: dict) -> Path:
    """The LoRA adapter (float16, no machine path in its config), the head, and ``INFO``."""
    import torch
    from safetensors.torch import save_file

    from cheetah.search.train import compact_adapter

    out.mkdir(parents=True, exist_ok=True)
    enc.model.save_pretrained(out)
    compact_adapter(out, base="the shipped embedder (cheetah/data/embedder), merged")
    head = {k: v.detach().to(torch.float16) for k, v in enc.head.state_dict().items()}
    save_file(head | {"scale": enc.scale.detach().to(torch.float32)}, out / HEAD)
    (out / INFO).write_text(json.dumps({"embedder": "default", "max_tokens": MAX_TOKENS} | info,
                                       indent=1))  # fmt: skip
    return out
