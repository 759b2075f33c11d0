"""The PyTorch side of training: one optimizer step from samples, weight sync, checkpoints.

A step runs micro-batches of whole samples (padded to the longest in the micro-batch,
about ``micro_batch_tokens`` tokens each), accumulates gradients, clips them, and
steps AdamW. The samples of a step start alike (chat template, a system prompt of ~1,100
tokens, for RL a group's query), so within a micro-batch the common prefix that predicts no
trained token runs once, at batch 1, and the rows continue from its KV cache; gradients
flow back through that cache, so the result is the plain forward's (``share_prefix``).

The RL objective is ``loss.policy_loss`` with the behaviour logprobs the engine recorded,
both under the distribution the engine sampled from (softmax(logits / ``temperature``);
training rollouts use no top-k/top-p). The proximal logprobs are the trainer's own before
the batch's first update (decoupled PPO). With ``updates_per_batch = 1`` (the default) they
come from the same forward pass, so the PPO ratio is exactly 1 and the clip never acts: the
step is a token-level policy gradient weighted by the truncated importance weight
min(pi_proximal / pi_behaviour, is_cap), which corrects for the engine's staleness and
numerics. With more updates per batch (PPO epochs: more learning per rollout, which is
what costs on CPU), each later update's ratio is against those first logprobs and
``loss.clip_low``/``clip_high`` bound it. With ``loss.kl_coef`` > 0 the job first calls
``set_reference`` (the weights RL starts from, loaded as a second, frozen model: memory for
one more copy of the weights); each micro-batch's reference logprobs are computed once per
batch, without gradients, and the loss adds the KL penalty to them (with a reference and
``kl_coef`` 0, the KL is only reported). SFT uses the same batching with a token-level
cross-entropy on the masked-in tokens. The compute dtype is ``precision``, resolved once
for the model's device (``model/precision.py``): bf16 autocast where the device computes bf16
fast (``auto``) or where it is forced, fp32 otherwise.

Weight sync: ``sync_to(engine)`` hands the engine the trainer's tensors (in process,
or through Ray's object store for an engine actor: the state dict is ``ray.put`` once
and every engine loads it); ``save_for_engines`` writes a HF checkpoint directory that
remote engines (vLLM, SGLang, ``cheetah serve``) reload. Both report their time.

Checkpoints are HF directories (``save_pretrained``, safetensors) plus
``trainer_state.pt`` (optimizer, step, version), ``rng-<rank>.pt`` and ``cursor.json``
(whatever the caller needs to resume its data stream). Data parallel: the same step runs on
every rank of a process group with the model sharded by FSDP2 (``rl/sharding.py``) and its
share of the samples, and equals one process's step (token mean over the whole batch,
gradients summed over ranks); the weights are gathered for engines and checkpoints, the
optimizer state is checkpointed shard by shard (``<checkpoint>/optimizer``). Micro-batches and
the forward they run are ``rl/batching.py``'s. Deliberately left out: tensor parallelism.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from cheetah.memory import release_memory
from cheetah.model.precision import resolve_precision
from cheetah.rl import sharding
from cheetah.rl.batching import SelectedLogits, micro_batches, pad_batch, shared_prefix_len
from cheetah.rl.config import TrainConfig
from cheetah.rl.data import Sample
from cheetah.rl.loss import entropy_from_logits, policy_loss, token_logprobs


@dataclass
class StepMetrics:
    loss: float
    grad_norm: float
    tokens: int
    samples: int
    clip_fraction: float = 0.0
    mismatch_kl: float = 0.0
    mismatch_max_abs: float = 0.0
    is_weight_mean: float = 1.0
    entropy: float = 0.0
    reference_kl: float = 0.0
    step_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


class Trainer:
    """``temperature`` is the rollouts' sampling temperature: RL logprobs are those of
    softmax(logits / T), the distribution the engine sampled from (training rollouts use
    no top-k/top-p filter); SFT and ``logprobs(temperature=1)`` use T = 1."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        cfg: TrainConfig | None = None,
        *,
        temperature: float = 1.0,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        # The forward the step runs (module ``SelectedLogits``); ``rl/sharding.py`` makes it
        # the root FSDP unit when ``model`` is sharded.
        self.lm = getattr(model, "selected_logits", None) or SelectedLogits(model)
        self.cfg = cfg or TrainConfig()
        self.temperature = temperature
        device = next(model.parameters()).device
        # fp32 or bf16 autocast, with why (for the run's log and summary.json)
        self.precision = resolve_precision(self.cfg.precision, str(device))
        self.autocast = self.precision.dtype == "bf16"
        self.opt = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=self.cfg.lr,
            betas=self.cfg.betas,
            weight_decay=self.cfg.weight_decay,
        )
        self.step_count = 0
        self.version = 0
        self.reference: Any = None  # ``set_reference``: the KL penalty's frozen policy
        if self.cfg.grad_checkpointing:
            enable = (
                getattr(model, "activation_checkpointing_enable", None)
                or model.gradient_checkpointing_enable
            )
            enable()
            model.config.use_cache = False
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else tokenizer.eos_token_id)
        layers = DynamicCache(config=model.config).layers
        self._prefix_cache_ok = bool(layers) and all(type(x) is DynamicLayer for x in layers)
        # Sharded (FSDP2), a layer's prefix pass gets its gradient through the KV cache, not
        # its output, so FSDP's pre-backward hook would not gather the layer for it: whole
        # sequences there.
        self._prefix_cache_ok &= getattr(model, "selected_logits", None) is None

    def _forward(
        self, b: dict[str, torch.Tensor], temperature: float, prefix: int = 0, lm: Any = None
    ) -> dict[str, torch.Tensor]:
        """Logprobs (under softmax(logits / temperature)) of the trained tokens only, flattened
        to [1, N] with what goes with them (``SelectedLogits`` says which positions run the
        head; ``prefix`` is at most ``shared_prefix_len`` of the batch). ``lm``: another
        ``SelectedLogits`` than the policy's (the reference)."""
        device = next(self.model.parameters()).device
        b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
        sel = b["mask"][:, 1:].bool()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.autocast):
            logits = (lm or self.lm)(b["input_ids"], b["attention"], sel, prefix).float()
        if temperature != 1.0:
            logits = logits / temperature
        targets = b["input_ids"][:, 1:][sel]
        adv = b["advantage"][:, None].expand_as(sel)[sel]
        return {
            "lp": token_logprobs(logits, targets)[None],
            "logits": logits[None],
            "behaviour": b["behaviour"][:, 1:][sel][None],
            "advantage": adv[None],
            "mask": torch.ones(1, targets.numel(), device=device),
        }

    def set_reference(self, spec: str, mxfp8: bool = False) -> None:
        """Load the KL penalty's reference policy (``spec`` as ``model.spec``: a checkpoint
        directory, say), frozen, on the trainer's device; unsharded on every rank."""
        from cheetah.model.loading import load_policy

        device = next(self.model.parameters()).device
        model = load_policy(spec, mxfp8).model.to(device).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self.reference = SelectedLogits(model)

    def _run(
        self,
        samples: list[Sample],
        objective: str,
        proximal: dict[int, torch.Tensor] | None = None,
        reference: dict[int, torch.Tensor] | None = None,
    ) -> StepMetrics:
        """One optimizer update. For RL, ``proximal`` holds each micro-batch's logprobs (by
        its index) from before the batch's first update: empty, this update fills it (the ratio
        is 1); filled, a later update on the same batch takes its ratio against them (and the
        clip acts). ``reference`` is filled the same way with the reference policy's logprobs
        when the KL penalty is on."""
        t0 = time.perf_counter()
        proximal = {} if proximal is None else proximal
        reference = {} if reference is None else reference
        if objective == "rl" and self.cfg.loss.kl_coef > 0 and self.reference is None:
            raise RuntimeError("loss.kl_coef > 0 needs set_reference() before the first RL step")
        with_kl = objective == "rl" and self.reference is not None  # kl_coef 0: reported only
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        world = sharding.world_size()
        if world > 1 and not samples:
            raise ValueError("every rank needs at least one sample (its forward joins the rest)")
        # Data parallel (``rl/sharding.py``): each rank has its share of the samples; the
        # token mean is over the whole batch, and FSDP's gradient mean over ranks is undone
        # (times ``world``) so the update is the one process's, whatever the split.
        total = sharding.sum_over_ranks(float(sum(s.trained_tokens for s in samples)))
        if total == 0:
            raise ValueError("no trainable tokens in this batch (every loss mask is 0)")
        agg = {
            k: 0.0
            for k in (
                "loss",
                "clip_fraction",
                "mismatch_kl",
                "mismatch_max_abs",
                "is_weight_mean",
                "entropy",
                "reference_kl",
            )
        }
        # sliding-window or other special cache layers: whole sequences, as without the option
        share_prefix = self.cfg.share_prefix and self._prefix_cache_ok
        batches: list[list[Sample] | None] = list(
            micro_batches(samples, self.cfg.micro_batch_tokens, share_prefix)
        )
        if world > 1:  # FSDP's gathers pair up across ranks: all run as many passes
            batches += [None] * (int(sharding.max_over_ranks(len(batches))) - len(batches))
        for index, mb in enumerate(batches):
            counted = mb is not None  # None: a pass that only keeps the collectives in step
            mb = mb if mb is not None else samples[:1]
            temperature = self.temperature if objective == "rl" else 1.0
            prefix = shared_prefix_len(mb) if share_prefix and len(mb) > 1 else 0
            padded = pad_batch(mb, self.pad_id)
            f = self._forward(padded, temperature, prefix)
            lp, mask = f["lp"], f["mask"]
            if lp.numel() == 0 or not counted:
                if world > 1:
                    (lp.sum() * 0.0).backward()
                continue
            share = lp.numel() / total  # token-level mean over the whole batch
            if with_kl and index not in reference:
                with torch.no_grad():
                    ref = self._forward(padded, temperature, prefix, self.reference)
                reference[index] = ref["lp"]
            if objective == "rl":
                out = policy_loss(
                    lp,
                    f["behaviour"],
                    f["advantage"],
                    mask,
                    self.cfg.loss,
                    proximal_logprobs=proximal.setdefault(index, lp.detach()),
                    reference_logprobs=reference.get(index),
                )
                loss = out.loss
                agg["reference_kl"] += out.reference_kl * share
                agg["clip_fraction"] += out.clip_fraction * share
                agg["mismatch_kl"] += out.mismatch_kl * share
                agg["is_weight_mean"] += out.is_weight_mean * share
                agg["mismatch_max_abs"] = max(agg["mismatch_max_abs"], out.mismatch_max_abs)
            else:
                loss = -lp.mean()
            (loss * share * world).backward()
            agg["loss"] += float(loss.detach()) * share
            agg["entropy"] += entropy_from_logits(f["logits"].detach(), mask) * share
        if world > 1:
            keys = (
                "loss",
                "clip_fraction",
                "mismatch_kl",
                "is_weight_mean",
                "entropy",
                "reference_kl",
            )
            summed = sharding.sum_over_ranks(
                torch.tensor([agg[k] for k in keys], dtype=torch.float64)
            )
            agg |= dict(zip(keys, summed.tolist(), strict=True))
            agg["mismatch_max_abs"] = sharding.max_over_ranks(agg["mismatch_max_abs"])
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.model.eval()
        release_memory()  # the step's activations are free: give them back (memory.py)
        return StepMetrics(
            loss=agg["loss"],
            grad_norm=grad_norm,
            tokens=int(total),
            samples=len(samples),
            clip_fraction=agg["clip_fraction"],
            mismatch_kl=agg["mismatch_kl"],
            mismatch_max_abs=agg["mismatch_max_abs"],
            is_weight_mean=agg["is_weight_mean"] if objective == "rl" else 1.0,
            entropy=agg["entropy"],
            reference_kl=agg["reference_kl"],
            step_s=time.perf_counter() - t0,
        )

    def set_lr(self, lr: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr

    def rl_step(self, samples: list[Sample]) -> StepMetrics:
        """``updates_per_batch`` optimizer updates on ``samples``; the last one's metrics
        (its clip fraction is the share of tokens the clip held), the time of all."""
        proximal: dict[int, torch.Tensor] = {}
        reference: dict[int, torch.Tensor] = {}
        spent = 0.0
        for _ in range(self.cfg.updates_per_batch):
            metrics = self._run(samples, "rl", proximal, reference)
            spent += metrics.step_s
        metrics.step_s = spent
        self.step_count += 1
        return metrics

    def sft_step(self, samples: list[Sample]) -> StepMetrics:
        metrics = self._run(samples, "sft")
        self.step_count += 1
        return metrics

    @torch.no_grad()
    def logprobs(self, sample: Sample, temperature: float | None = None) -> list[float]:
        """The trainer's logprob of each masked-in token of ``sample`` under the rollouts'
        sampling distribution (the trainer's ``temperature`` unless given), for mismatch checks."""
        t = self.temperature if temperature is None else temperature
        return self._forward(pad_batch([sample], self.pad_id), t)["lp"][0].tolist()

    # -- weights out ------------------------------------------------------------------
    def engine_state(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the weights (what travels to engines through Ray or a server); a
        sharded model is gathered once, to rank 0 (the other ranks get ``{}``)."""
        if sharding.world_size() > 1:
            return sharding.full_state(self.model)
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    async def sync_to(self, engines: Iterable[Any]) -> float:
        """Load the current weights into in-process engines (or engine actors); seconds taken."""
        t0 = time.perf_counter()
        self.version += 1
        state = self.engine_state()
        ref = None
        for engine in engines:
            if hasattr(engine.load_weights, "remote"):  # a Ray actor: one object store copy
                import ray

                ref = ref if ref is not None else ray.put(state)
                await engine.load_weights.remote(ref, self.version)
            else:
                await engine.load_weights(state, self.version)
        return time.perf_counter() - t0

    def save_for_engines(self, directory: Path) -> float:
        """A HF checkpoint directory for engines that reload from disk (written by rank 0 of
        a sharded trainer, every rank taking part in the gather); seconds taken."""
        t0 = time.perf_counter()
        state = self.engine_state() if sharding.world_size() > 1 else None
        if sharding.rank() == 0:
            self.model.save_pretrained(directory, state_dict=state, safe_serialization=True)
            self.tokenizer.save_pretrained(directory)
        return time.perf_counter() - t0

    # -- checkpoints ----------------------------------------------------------------------
    def save_checkpoint(self, directory: Path, cursor: dict[str, Any]) -> Path:
        """Write ``directory`` atomically (a temp name, then rename). Sharded, every rank
        calls it: the weights are gathered into one HF directory, the optimizer state is
        written shard by shard (``rl/sharding.py``)."""
        directory = Path(directory)
        tmp = directory.with_name(directory.name + ".tmp")
        world, rank = sharding.world_size(), sharding.rank()
        if rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)  # left by a crash during an earlier save
            tmp.mkdir(parents=True)
        sharding.barrier()
        self.save_for_engines(tmp)
        state = {"step": self.step_count, "version": self.version, "world_size": world}
        if world > 1:
            sharding.save_optimizer(self.model, self.opt, tmp)
        else:
            state["optimizer"] = self.opt.state_dict()
        torch.save(torch.get_rng_state(), tmp / f"rng-{rank}.pt")
        if rank == 0:
            torch.save(state, tmp / "trainer_state.pt")
            (tmp / "cursor.json").write_text(json.dumps(cursor, indent=1))
        sharding.barrier()
        if rank == 0:
            if directory.exists():
                shutil.rmtree(directory)
            tmp.rename(directory)
        sharding.barrier()
        return directory

    def load_checkpoint(self, directory: Path) -> dict[str, Any]:
        """Restore weights, optimizer, step and version; return the saved cursor."""
        from cheetah.model.loading import read_state_dict

        directory = Path(directory)
        state = read_state_dict(directory)
        world = sharding.world_size()
        if world > 1:
            missing, unexpected = sharding.load_full_state(self.model, state)
        else:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
        real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied weights
        if real_missing or unexpected:
            raise ValueError(
                f"{directory}: checkpoint does not fit the model "
                f"(missing {real_missing[:3]}, unexpected {unexpected[:3]})"
            )
        ts = torch.load(directory / "trainer_state.pt", weights_only=False)
        saved_world = ts.get("world_size", 1)
        if saved_world != world:
            raise ValueError(
                f"{directory}: optimizer state saved by {saved_world} rank(s), this trainer "
                f"has {world}; resume with train.world_size = {saved_world}"
            )
        if world > 1:
            sharding.load_optimizer(self.model, self.opt, directory)
        else:
            self.opt.load_state_dict(ts["optimizer"])
        self.step_count, self.version = ts["step"], ts["version"]
        rng = directory / f"rng-{sharding.rank()}.pt"
        torch.set_rng_state(torch.load(rng) if rng.exists() else ts["rng"])
        return json.loads((directory / "cursor.json").read_text())
