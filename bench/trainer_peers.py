"""cheetah's trainer against TRL's: one SFT step and one GRPO step, same model, data, settings.

    python bench/trainer_peers.py                 # the quickstart's model and trainer settings
    python bench/trainer_peers.py --quick         # the tiny model, one timed step: a smoke test

Data: the quickstart's SFT demonstrations, made as ``cheetah train --config quickstart``
makes them (``rl/sft.py``: the oracle over the config's training tasks, shuffled with the
run's seed; ``run_tests`` and ``max_seq_len`` from the config), in-process sandboxes instead
of an env server (the episodes, and so the tokens, are the same). 16 are recorded.

SFT: the first ``sft_batch`` (8) demonstrations are the batch of every step. cheetah:
``Trainer.sft_step`` (``TrainJob.sft``'s call: micro-batches of ``micro_batch_tokens``, each
one's shared prefix run once, the LM head at trained positions only). TRL: ``SFTTrainer``,
``trainer.train()`` as users run it, on the same token ids with the loss mask as its
``completion_mask`` (``completion_only_loss``), packed ("bfd", so padding-free) into rows of
at most ``max_seq_len`` tokens (TRL's ``max_length``), one row per forward (its padding-free
collator joins a batch's rows into one sequence, and on CPU, without flash attention, that
sequence's attention is dense: longer rows only cost more), as many accumulation steps as
rows: each optimizer step trains on exactly the same tokens as cheetah's (a token mean over
the step; the warm-up losses agree). Both: the quickstart's precision (``auto``: bf16 autocast
where this CPU computes bf16 fast, as ``model/precision.py`` resolves it) and activation
checkpointing, ``torch.optim.AdamW`` with its betas and weight decay, constant lr
``sft_lr``, gradients clipped at ``grad_clip``.

GRPO: 16 demonstrations as 2 groups of ``group_size`` rollouts with fixed rewards (3 of 8
and 5 of 8 correct), group-normalized advantages (``loss.group_advantages``: TRL's
``scale_rewards="group"``), behaviour logprobs from the model (the trainer's, before any
update). cheetah: ``Trainer.rl_step``. TRL: ``GRPOTrainer``'s loss (``compute_loss`` on
the dict its generation step builds: prompt = the tokens before the first trained one,
completion = the rest, ``tool_mask`` = the loss mask there, ``num_items_in_batch``) with
``loss_type="dapo"`` (a token mean over the batch, cheetah's), ``beta=0`` (no KL: cheetah
has none), ``epsilon``/``epsilon_high`` = cheetah's ``clip_low``/``clip_high``; micro-batches of
``per_device_train_batch_size`` rows, the most (dividing 16) whose padded rows fit in
``micro_batch_tokens``; then clip, AdamW step, like ``Trainer.training_step`` does, in a loop
written here because TRL's own would generate the rollouts first.

Timing: one warm-up step per side, then the median of ``--steps``, steps interleaved
(cheetah's run from a TRL callback between TRL's steps) so that load from other jobs hits
both alike. "trained tok/s" counts loss-mask tokens, "seq tok/s" every token of the batch's
sequences (no padding, and a shared prefix counted once per sample although cheetah runs it
once per micro-batch); both sides train the same ones. "step memory" is the peak RSS during
a step above the RSS before it (Linux ``clear_refs``; freed heap handed back before each
step on both sides), the most over the timed steps; weights, gradients and AdamW state held
between steps are not in it.

What stays different (TRL's design, not removable here): TRL's fused LM head scores, on a
device without Triton (CPU), every position of a forward in fp32 tiles (SFT: the whole
packed row; GRPO: every completion position, tool results too), masking the loss
afterwards, where cheetah's head runs at trained positions only; TRL pads the 16 GRPO rows
to the longest prompt and completion of the batch; without vLLM its loss has no
engine-mismatch importance weight (cheetah's is one elementwise product on the same
forward); its SFT step also computes entropy and top-1 accuracy for its logs. TRL's timing
window starts after its batch is collated; cheetah's includes padding its batch.
Left out: GPUs, several ranks, generation (both steps start from finished rollouts).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

N_DEMOS = 16  # the GRPO batch: groups_per_step (2) x group_size (8) of the quickstart
REWARDS = [1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1]  # 3 of 8, then 5 of 8 correct


@dataclass
class Side:
    """Timed steps of one trainer on one phase."""

    name: str = ""
    times: list[float] = field(default_factory=list)
    memory_mb: float = 0.0
    warmup_loss: float = float("nan")
    _t0: float = 0.0
    _rss0: int = 0

    def start(self) -> None:
        from cheetah.memory import release_memory

        release_memory()
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        self._rss0 = _status_kb("VmRSS")
        self._t0 = time.perf_counter()

    def stop(self, timed: bool) -> None:
        seconds = time.perf_counter() - self._t0
        kind = "timed" if timed else "warm-up"
        print(f"{self.name}: {kind} step {seconds:.1f} s", file=sys.stderr, flush=True)
        if timed:
            self.times.append(seconds)
            self.memory_mb = max(self.memory_mb, (_status_kb("VmHWM") - self._rss0) / 1024)


def _status_kb(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise KeyError(name)


def demonstrations(cfg, tokenizer) -> list:
    """``N_DEMOS`` oracle demonstrations of the config's training tasks, chosen as
    ``sft_samples_for`` chooses them (tasks with a reference patch, shuffled with the run's
    seed, the first ones); a few spare tasks cover any the oracle does not solve."""
    from cheetah.rl.sft import collect_demonstrations
    from cheetah.tasks.loaders import load_tasks, select_tasks
    from cheetah.tasks.session import local_sessions

    tasks = select_tasks(
        load_tasks(cfg.tasks.file), tier=cfg.tasks.tiers(), split=cfg.tasks.train_split
    )
    tasks = [t for t in tasks if t.reference_patch]
    random.Random(cfg.run.seed).shuffle(tasks)
    r = cfg.rollout
    samples = asyncio.run(
        collect_demonstrations(
            tasks[: N_DEMOS + 4],
            local_sessions(r.sandbox),
            tokenizer,
            run_tests=cfg.train.sft_run_tests,
            max_len=cfg.train.max_seq_len,
            concurrency=r.workers * r.worker_capacity,
            log=lambda m: None,
        )
    )
    if len(samples) < N_DEMOS:
        raise SystemExit(f"only {len(samples)} demonstrations recorded, {N_DEMOS} needed")
    return samples[:N_DEMOS]


# -- SFT ---------------------------------------------------------------------------------------
def _shared_args(cfg) -> dict:
    """The trainer settings both TRL trainers take from the quickstart's config."""
    from cheetah.model.precision import resolve_precision

    t = cfg.train
    return {
        "lr_scheduler_type": "constant",
        "optim": "adamw_torch",
        "adam_beta1": t.betas[0],
        "adam_beta2": t.betas[1],
        "weight_decay": t.weight_decay,
        "max_grad_norm": t.grad_clip,
        "bf16": resolve_precision(t.precision, "cpu").dtype == "bf16",  # what ours computes in
        "gradient_checkpointing": t.grad_checkpointing,
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": cfg.run.seed,
    }


def bench_sft(
    base, tokenizer, cfg, samples, steps: int, out_dir: Path
) -> tuple[dict[str, Side], str]:
    """Both SFT steps; the sides and how TRL laid the batch out."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer
    from trl.data_utils import pack_dataset

    from cheetah.rl.trainer import Trainer

    t = cfg.train
    ours = Trainer(copy.deepcopy(base), tokenizer, t, temperature=1.0)
    ours.set_lr(t.sft_lr)
    data = Dataset.from_dict(
        {
            "input_ids": [s.input_ids for s in samples],
            "completion_mask": [s.loss_mask for s in samples],
        }
    )
    # TRL's max_length is the quickstart's max_seq_len; a forward runs one packed row: the
    # padding-free collator joins a batch's rows into one sequence, and without flash
    # attention (CPU) its attention is dense over that sequence's length
    rows = len(pack_dataset(data.rename_column("completion_mask", "labels"), t.max_seq_len, "bfd"))
    args = SFTConfig(
        output_dir=str(out_dir / "sft"),
        max_steps=steps + 1,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=rows,  # one optimizer step = the whole batch, like cheetah's
        packing=True,
        packing_strategy="bfd",
        padding_free=True,
        max_length=t.max_seq_len,
        completion_only_loss=True,
        learning_rate=t.sft_lr,
        warmup_steps=0,
        logging_steps=1,
        **_shared_args(cfg),
    )
    sides = {"cheetah": Side("SFT cheetah"), "TRL": Side("SFT TRL")}

    class Interleave(TrainerCallback):
        """Times TRL's optimizer steps; runs cheetah's step i after TRL's step i."""

        def on_step_begin(self, args, state, control, **kw):
            sides["TRL"].start()

        def on_step_end(self, args, state, control, **kw):
            step = state.global_step - 1  # already advanced for this step
            sides["TRL"].stop(timed=step > 0)
            sides["cheetah"].start()
            m = ours.sft_step(samples)
            sides["cheetah"].stop(timed=step > 0)
            if step == 0:
                sides["cheetah"].warmup_loss = m.loss

        def on_log(self, args, state, control, logs=None, **kw):
            if state.global_step == 1 and logs and "loss" in logs:
                sides["TRL"].warmup_loss = float(logs["loss"])

    trl = SFTTrainer(
        model=copy.deepcopy(base),
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Interleave()],
    )
    if len(trl.train_dataset) != rows:
        raise RuntimeError(f"TRL packed {len(trl.train_dataset)} rows, expected {rows}")
    trl.train()
    return sides, f"TRL packed it into {rows} rows of <= {t.max_seq_len} tokens, one per forward"


# -- GRPO --------------------------------------------------------------------------------------
def rl_samples(trainer, samples, group_size: int) -> list:
    """The demonstrations as rollouts: advantages from ``REWARDS`` per group, behaviour
    logprobs the trainer's own (no update yet)."""
    import torch

    from cheetah.rl.loss import group_advantages

    gids = torch.tensor([i // group_size for i in range(len(samples))])
    adv = group_advantages(torch.tensor(REWARDS[: len(samples)], dtype=torch.float32), gids)
    out = []
    for s, a in zip(samples, adv.tolist(), strict=True):
        lps = iter(trainer.logprobs(s, temperature=1.0))
        behaviour = [next(lps) if m else 0.0 for m in s.loss_mask]
        out.append(replace(s, behaviour_logprobs=behaviour, advantage=a))
    return out


def trl_grpo_inputs(samples, pad_id: int, rows: int) -> list[dict]:
    """The dict ``GRPOTrainer._generate_and_score_completions`` returns, for ``samples``
    (prompts left-padded, completions right-padded over the whole batch), split into
    micro-batches of ``rows``."""
    import torch

    firsts = [s.loss_mask.index(1) for s in samples]
    prompts = [s.input_ids[:f] for s, f in zip(samples, firsts, strict=True)]
    completions = [s.input_ids[f:] for s, f in zip(samples, firsts, strict=True)]
    tools = [s.loss_mask[f:] for s, f in zip(samples, firsts, strict=True)]
    p, c = max(map(len, prompts)), max(map(len, completions))

    def left(rows_, value):
        return torch.tensor([[value] * (p - len(r)) + r for r in rows_])

    def right(rows_, value):
        return torch.tensor([r + [value] * (c - len(r)) for r in rows_])

    full = {
        "prompt_ids": left(prompts, pad_id),
        "prompt_mask": left([[1] * len(x) for x in prompts], 0),
        "completion_ids": right(completions, pad_id),
        "completion_mask": right([[1] * len(x) for x in completions], 0),
        "tool_mask": right(tools, 1),
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
    }
    items = (full["completion_mask"] * full["tool_mask"]).sum()
    return [
        {k: v[i : i + rows] for k, v in full.items()} | {"num_items_in_batch": items}
        for i in range(0, len(samples), rows)
    ]


def bench_grpo(
    base, tokenizer, cfg, demos, steps: int, out_dir: Path
) -> tuple[dict[str, Side], str]:
    """Both GRPO steps; the sides and the micro-batches each ran."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from cheetah.rl.batching import micro_batches
    from cheetah.rl.trainer import Trainer

    t, r = cfg.train, cfg.rollout
    ours = Trainer(copy.deepcopy(base), tokenizer, t, temperature=r.temperature)
    samples = rl_samples(ours, demos, r.group_size)
    width = max(s.loss_mask.index(1) for s in samples) + max(
        len(s.input_ids) - s.loss_mask.index(1) for s in samples
    )
    rows = max(b for b in (1, 2, 4, 8, 16) if b == 1 or b * width <= t.micro_batch_tokens)
    args = GRPOConfig(
        output_dir=str(out_dir / "grpo"),
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=len(samples) // rows,
        num_generations=r.group_size,
        max_completion_length=width,
        temperature=r.temperature,
        loss_type="dapo",
        beta=0.0,
        epsilon=t.loss.clip_low,
        epsilon_high=t.loss.clip_high,
        learning_rate=t.lr,
        **_shared_args(cfg),
    )
    trl = GRPOTrainer(
        model=copy.deepcopy(base),
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["unused"] * len(samples)}),
        processing_class=tokenizer,
    )
    model = trl.model
    if t.grad_checkpointing:  # what Trainer.train() does before its loop
        model.activation_checkpointing_enable()
        model.config.use_cache = False
    opt = trl.create_optimizer()
    trl.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    batches = trl_grpo_inputs(samples, ours.pad_id, rows)
    params = [p for p in model.parameters() if p.requires_grad]

    def trl_step() -> float:
        model.train()
        total = 0.0
        for inputs in batches:
            loss = trl.compute_loss(model, inputs)
            trl.accelerator.backward(loss)
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    sides = {"cheetah": Side("GRPO cheetah"), "TRL": Side("GRPO TRL")}
    for i in range(steps + 1):
        sides["cheetah"].start()
        m = ours.rl_step(samples)
        sides["cheetah"].stop(timed=i > 0)
        sides["TRL"].start()
        loss = trl_step()
        sides["TRL"].stop(timed=i > 0)
        if i == 0:
            sides["cheetah"].warmup_loss, sides["TRL"].warmup_loss = m.loss, loss
    ours_rows = [len(b) for b in micro_batches(samples, t.micro_batch_tokens, t.share_prefix)]
    layout = (
        f"micro-batches (rows): cheetah {ours_rows}, TRL {[rows] * len(batches)} padded to "
        f"{width} tokens"
    )
    return sides, layout


# -- report ------------------------------------------------------------------------------------
def report(phase: str, sides: dict[str, Side], samples: list) -> list[str]:
    """Table rows: each side's median step and throughput, then the ratio cheetah/TRL."""
    trained = sum(s.trained_tokens for s in samples)
    seq = sum(len(s.input_ids) for s in samples)
    lines = []
    for name, side in sides.items():
        med = statistics.median(side.times)
        lines.append(
            f"{phase:>5} | {name:>7} | {med:>8.2f} | {min(side.times):>6.2f}-{max(side.times):<6.2f} "
            f"| {trained / med:>13.1f} | {seq / med:>9.1f} | {side.memory_mb:>7.0f} "
            f"| {side.warmup_loss:.6f}"
        )
    a, b = sides["cheetah"], sides["TRL"]
    speed = statistics.median(b.times) / statistics.median(a.times)
    mem = a.memory_mb / b.memory_mb if b.memory_mb else float("nan")
    lines.append(
        f"{phase:>5} | cheetah/TRL: tokens/s x{speed:.2f} (either count), step memory x{mem:.2f}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default=None, help="default, tiny, or a model path (default: the quickstart's)"
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps per side and phase (after 1 warm-up)"
    )
    parser.add_argument("--quick", action="store_true", help="the tiny model and 1 timed step")
    parser.add_argument("--only", choices=["sft", "grpo"], help="run one phase")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.steps = args.model or "tiny", 1
    argv = sys.argv[1:] if argv is None else argv

    import logging

    import torch
    import transformers
    import trl

    from cheetah.model.loading import load_model
    from cheetah.rl.config import load_config

    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    cfg = load_config("quickstart")
    spec = args.model or cfg.model.spec
    loaded = load_model(spec)
    t0 = time.perf_counter()
    demos = demonstrations(cfg, loaded.tokenizer)
    demo_s = time.perf_counter() - t0
    sft_batch = demos[: cfg.train.sft_batch]
    load0 = os.getloadavg()[0]
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        sft = grpo = ""
        if args.only in (None, "sft"):
            sides, sft = bench_sft(
                loaded.model, loaded.tokenizer, cfg, sft_batch, args.steps, Path(tmp)
            )
            out += report("SFT", sides, sft_batch)
        if args.only in (None, "grpo"):
            sides, grpo = bench_grpo(
                loaded.model, loaded.tokenizer, cfg, demos, args.steps, Path(tmp)
            )
            out += report("GRPO", sides, demos)
    t = cfg.train
    from cheetah.model.precision import resolve_precision

    def sizes(batch) -> str:
        n = [len(s.input_ids) for s in batch]
        m = [s.trained_tokens for s in batch]
        return (
            f"{len(batch)} samples, {sum(n)} tokens ({min(n)}-{max(n)} each), {sum(m)} trained "
            f"({min(m)}-{max(m)} each)"
        )

    print("$ " + shlex.join(["python", "bench/trainer_peers.py", *argv]))
    print(
        f"model {loaded.name} ({spec}); torch {torch.__version__}, transformers "
        f"{transformers.__version__}, trl {trl.__version__}, {torch.get_num_threads()} CPU threads; "
        f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)"
    )
    print(
        f"quickstart trainer settings: precision {t.precision} -> "
        f"{resolve_precision(t.precision, 'cpu').dtype}, grad_checkpointing {t.grad_checkpointing}, "
        f"micro_batch_tokens {t.micro_batch_tokens}, AdamW betas {t.betas} wd {t.weight_decay}, "
        f"grad_clip {t.grad_clip}; {len(demos)} demonstrations recorded in {demo_s:.0f} s"
    )
    if sft:
        print(f"SFT batch: {sizes(sft_batch)}; lr {t.sft_lr}; {sft}")
    if grpo:
        print(f"GRPO batch: {sizes(demos)}, rewards {REWARDS}; lr {t.lr}; {grpo}")
    print(f"step s: median of {args.steps} timed steps after 1 warm-up; step MB: step memory")
    print(
        f"{'phase':>5} | {'trainer':>7} | {'step s':>8} | {'min-max s':<13} | {'trained tok/s':>13} "
        f"| {'seq tok/s':>9} | {'step MB':>7} | warm-up loss"
    )
    print("\n".join(out))
    print(
        "not made equal: on CPU (no Triton) TRL's fused LM head scores every position of a "
        "forward in fp32 (cheetah's head: trained positions only); TRL pads the GRPO rows to the "
        "batch's longest prompt and completion; without vLLM TRL's GRPO loss has no "
        "engine-mismatch weight (cheetah's: one elementwise product); TRL's SFT step also "
        "computes entropy and top-1 accuracy for its logs; TRL's GRPO step is its compute_loss "
        "per micro-batch, backward, clip, AdamW in a loop written here (its train() would "
        "generate first); TRL's SFT timing starts after its batch is collated"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
