"""The training run's config: typed sections, TOML file plus dotted overrides, saved resolved.

``cheetah train --config quickstart --set train.lr=3e-5 --set rollout.group_size=4``.
Each setting lives here once, with its default and description: the trainer's own
(``TrainConfig``, with ``LossConfig`` as ``[train.loss]``) is the base of the ``[train]``
section, the grader's (``tasks.grader.GraderConfig``) is the ``[grader]`` section, so the
trainer, the loss and the grader take exactly what the TOML says. The run directory keeps
``config.json`` as resolved.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cheetah import bundled
from cheetah.config import ConfigError, read_toml, validate
from cheetah.harness.loop import AgentLimits
from cheetah.inference.remote import ServerKind
from cheetah.rl.lr_schedule import lr_at
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.schema import Split


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LossConfig(BaseModel):
    """The loss's settings (TOML ``[train.loss]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float = Field(0.2, ge=0.0, description="lower clip of the ratio: 1 - clip_low")
    clip_high: float = Field(
        0.28, ge=0.0, description="upper clip: 1 + clip_high (asymmetric, DAPO clip-higher)"
    )
    is_cap: float = Field(
        2.0, gt=0.0, description="truncation of the proximal/behaviour importance weight"
    )
    kl_coef: float = Field(
        0.0,
        ge=0.0,
        description="weight of a KL penalty to the policy RL started from (the SFT "
        "checkpoint when the run has a warm start); 0: none and no reference model is loaded",
    )


class TrainConfig(BaseModel):
    """The trainer's settings, defaulted here once; the run config's ``[train]`` section
    extends this class, so every one of them is a TOML key (``[train.loss]`` included)."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0.0, description="peak learning rate of RL steps")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    betas: tuple[
        Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]
    ] = Field((0.9, 0.98), description="AdamW betas, each in [0, 1)")
    grad_clip: float = Field(1.0, gt=0.0, description="clip of the global gradient norm")
    micro_batch_tokens: int = Field(
        4096, ge=1, description="tokens one forward/backward runs at most (padded)"
    )
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="the trainer's compute dtype: auto = bf16 autocast where the device "
        "computes bf16 fast (CUDA 8.0+, CPUs with AMX, AVX512-BF16 or ARM bf16 and a bf16 "
        "matmul measured no slower than fp32's), fp32 elsewhere; bf16 forces autocast (with "
        "a warning where it is slow); the run's log and summary.json say what was chosen "
        "(cheetah/model/precision.py)",
    )
    grad_checkpointing: bool = Field(
        False, description="recompute activations in backward (less memory, more compute)"
    )
    updates_per_batch: int = Field(
        1,
        ge=1,
        description="optimizer updates on each RL batch (PPO epochs); above 1 the ratio moves "
        "away from 1 and loss.clip_low/clip_high bound it",
    )
    share_prefix: bool = Field(
        True, description="run each micro-batch's shared token prefix once (exact)"
    )
    loss: LossConfig = Field(default_factory=LossConfig)

    @model_validator(mode="before")
    @classmethod
    def _bf16_is_gone(cls, data: Any) -> Any:
        # the old switch forced bf16 on CPUs where it is 38x slower (issue 45): a config that
        # still sets it is told what replaced it rather than mapped to the same mistake
        if isinstance(data, dict) and "bf16" in data:
            now = '"auto" (or "bf16" to force it)' if data["bf16"] else '"fp32"'
            raise ValueError(
                'train.bf16 was replaced by train.precision = "auto" | "fp32" | "bf16" (auto: '
                "bf16 only where this machine computes it fast; `cheetah doctor` shows which); "
                f"bf16 = {str(data['bf16']).lower()} is now precision = {now}"
            )
        return data


class RunSection(_Section):
    name: str = Field(
        "quickstart",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="run directory name under out_dir (letters, digits, . _ -)",
    )
    out_dir: Path = Field(Path("runs"), description="where run directories go")
    seed: int = Field(0, ge=0, description="task order and sampling seed")


class ModelSection(_Section):
    spec: str = Field(
        "default",
        description="default | tiny | a HF directory (a MoE from `cheetah moe upcycle` too)",
    )
    max_batch: int = Field(16, ge=1, description="engine batch (concurrent sequences)")
    engine_threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads of the run's local engine (unset: as many as the machine has "
        "cores; Ray alone would give it one)",
    )
    max_batch_tokens: int = Field(
        65536, ge=1, description="engine KV bound: rows x (longest prompt + max_new_tokens)"
    )
    prefix_cache_tokens: int | None = Field(
        None,
        ge=0,
        description="tokens of prompt-prefix KV the engine keeps for reuse across turns and "
        "group members (unset: the engine's default; 0: off, every prompt prefilled in full; "
        "outputs are the same either way)",
    )
    device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:\d+)?|xpu(:\d+)?|mps)$",
        description="torch device of the trainer and the engine actor (cpu, cuda, cuda:1); "
        "both share it",
    )
    engine_urls: list[str] = Field(
        default_factory=list,
        description="OpenAI-compatible servers (cheetah serve, vLLM, SGLang) to roll out on "
        "instead of the local engine actor; new weights reach them as checkpoint directories",
    )
    engine_kind: ServerKind = Field(
        "cheetah",
        description="what serves engine_urls: its weight-update calls differ "
        "(inference/remote.py has each server's launch command)",
    )
    staging_dir: Path = Field(
        Path("/tmp/cheetah-weights"),
        description="where checkpoints for engine_urls are written (the servers must read it)",
    )
    engine_token_file: Path | None = Field(
        None,
        description="file holding the bearer token of the engine_urls servers (cheetah serve "
        "--token-file; it refuses weight syncs without one); unset: $CHEETAH_API_TOKEN, "
        "then $OPENAI_API_KEY",
    )


class TaskSet(_Section):
    """Tasks of a task file chosen by tier, split and tag (the base of the sets below)."""

    file: Path = Field(description="JSONL task file, or a bundled task set's name (``real``)")
    tier: str | list[str] | None = Field(
        None, description="only tasks of this tier, or of these tiers (None: all)"
    )
    split: Split = Field("heldout", description="only tasks of this split")
    tag: str | list[str] | None = Field(
        None,
        description="only tasks with this tag, or with any of these (``heldout-repo``: repos "
        "never trained on; ``compare``: an inverted comparison)",
    )
    limit: int = Field(
        0, ge=0, description="at most this many, shared by the tiers and evenly spaced (0: all)"
    )


class EvalSet(TaskSet):
    """Held-out tasks of another task file (``[[tasks.also_eval]]``)."""

    samples: int = Field(
        0,
        ge=0,
        le=64,
        description="also run each of these tasks this many times at rollout.temperature in "
        "every held-out stage and report pass@k (k = samples): the ceiling RL moves pass@1 "
        "toward (0: greedy only)",
    )


class SftSet(TaskSet):
    """Training tasks of other tiers (or another file) demonstrated in SFT only
    (``[[tasks.sft_also]]``): RL and the held-out stages keep ``tasks.tier``."""

    split: Split = Field("train", description="only tasks of this split")
    limit: int = Field(
        ..., ge=1, description="this many demonstrations, in place of as many of tasks.tier's"
    )


class TasksSection(_Section):
    file: Path = Field(
        Path("benchmark"), description="JSONL task file, or a bundled task set's name"
    )
    tier: str | list[str] | None = Field(
        "easy", description="only tasks of this tier, or of these tiers (None: all)"
    )
    train_split: Split = Field("train", description="the tasks RL and SFT train on")
    eval_split: Split = Field("heldout", description="the tasks every stage is evaluated on")
    eval_limit: int = Field(
        0,
        ge=0,
        description="evaluate at most this many tasks, shared equally by the tiers and evenly "
        "spaced over the file within each (0: all)",
    )
    also_eval: list[EvalSet] = Field(
        default_factory=list,
        description="more held-out tasks from other task files (``[[tasks.also_eval]]``), "
        "evaluated in every stage beside the file's own: e.g. real code never trained on",
    )
    sft_also: list[SftSet] = Field(
        default_factory=list,
        description="demonstrations of other tiers in SFT (``[[tasks.sft_also]]``), e.g. "
        "plain bug reports that a search starts; they take the place of as many of the "
        "sft_steps x sft_batch demonstrations of tasks.tier",
    )

    def tiers(self) -> list[str] | None:
        return [self.tier] if isinstance(self.tier, str) else self.tier

    def files(self) -> list[Path]:
        """Every task file the run reads (the training file first)."""
        return [self.file, *(s.file for s in [*self.also_eval, *self.sft_also])]


class RolloutSection(AgentLimits):
    """How episodes are sampled and rewarded. The agent's own limits (``max_turns``,
    ``max_tokens``, ``max_wall_s``, ``call_timeout_s``) are ``AgentLimits``' fields, with its
    defaults and bounds: the same keys as ``cheetah agent``'s and ``cheetah eval``'s flags."""

    def limits(self) -> AgentLimits:
        return AgentLimits.model_validate(self.model_dump(include=set(AgentLimits.model_fields)))

    group_size: int = Field(
        8, ge=2, description="rollouts per task (G; one alone has no group to be compared with)"
    )
    groups_per_step: int = Field(2, ge=1, description="complete groups per optimizer step")
    workers: int = Field(2, ge=1, description="Ray rollout workers")
    worker_capacity: int = Field(4, ge=1, description="rollouts each worker runs at once")
    max_staleness: int = Field(2, ge=0, description="drop groups older than this many versions")
    max_new_tokens: int = Field(256, ge=1, description="tokens per assistant message")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of rollouts")
    format_weight: float = Field(
        0.0,
        ge=0.0,
        description="reward shaping: this times the share of tool calls that ran without "
        "error is added to the task reward (see cheetah/rl/reward.py); 0 = task reward only",
    )
    turn_cost: float = Field(
        0.0,
        ge=0.0,
        description="reward shaping: this times the number of assistant turns is subtracted "
        "from a rollout with task reward, so solving in fewer turns (several calls per turn) is "
        "worth more; failures pay nothing (no reward for giving up early); 0 = off",
    )
    claim_cost: float = Field(
        0.0,
        ge=0.0,
        description="reward shaping: subtracted from a rollout whose closing answer claims a "
        "change the workspace does not show (cheetah/tasks/claims.py); 0 = off",
    )
    dynamic_sampling: bool = Field(
        True,
        description="drop a group whose rewards are all equal (it has no advantage to learn "
        "from) and start another in its place; dropped groups are counted per step",
    )
    max_resampled_groups: int = Field(
        64,
        ge=0,
        description="how many groups dynamic sampling may replace in a run; after that, "
        "uninformative groups are kept (and a step without signal is skipped)",
    )
    sandbox: Literal["isolated", "local"] = Field(
        "isolated",
        description="backend of the env server started for the run when env_urls is empty; "
        "'local' runs agent commands UNSANDBOXED (trusted tasks only)",
    )
    env_urls: list[str] = Field(
        default_factory=list,
        description="env servers (cheetah env serve) the rollout workers reach through the "
        "fleet client; empty: one server is started on this machine for the run",
    )
    env_token_file: Path | None = Field(
        None, description="file holding the bearer token of the env_urls servers"
    )


class TrainSection(TrainConfig):
    """The trainer's own settings (``TrainConfig`` above: lr, clip, micro-batches, precision,
    ``loss`` ...) plus what the job does with it."""

    steps: int = Field(4, ge=0, description="RL optimizer steps (0: SFT and evaluation only)")
    warmup_frac: float = Field(
        0.1, ge=0.0, le=1.0, description="share of SFT and of RL steps with a linear LR warmup"
    )
    lr_decay: Literal["cosine", "constant"] = Field(
        "cosine",
        description="RL's LR after warmup: cosine decay to 10% of the peak, or constant "
        "(a run of a few steps: cosine leaves the last one a tenth of the peak)",
    )
    sft_lr_decay: Literal["cosine", "constant"] = Field(
        "cosine", description="the same for the SFT warm start"
    )
    max_seq_len: int = Field(
        2048, ge=1, description="tokens of one trained sequence; longer samples are cut"
    )
    loggers: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        description="also send metrics and stages to TensorBoard (<run>/tensorboard) and/or "
        "W&B (offline in <run>/wandb unless WANDB_MODE is set); the run store always gets them",
    )
    mxfp8: bool = Field(
        False,
        description="run every linear and expert GEMM of trainer and engine in MXFP8 "
        "(emulated exactly on CPU; cheetah/model/mxfp8.py)",
    )
    checkpoint_every: int = Field(2, ge=1, description="steps between checkpoints")
    eval_every: int = Field(
        0,
        ge=0,
        description="also evaluate the held-out tasks every this many RL steps: the learning "
        "curve (0: only before and after RL)",
    )
    world_size: int = Field(
        1,
        ge=1,
        description="trainer ranks: 1 trains in the driver process; N > 1 shards the model "
        "over N Ray actor ranks with FSDP2 (gloo on CPU, one GPU each with NCCL on cuda)",
    )
    sft_steps: int = Field(0, ge=0, description="SFT steps on oracle trajectories before RL")
    sft_lr: float = Field(5e-5, gt=0.0, description="peak learning rate of SFT steps")
    sft_batch: int = Field(4, ge=1, description="oracle trajectories per SFT step (rotating)")
    sft_data: Path | None = Field(
        None,
        description="SFT on the correct trajectories of this chat-format JSON Lines file "
        "(`cheetah export`) instead of oracle demonstrations",
    )
    sft_run_tests: bool = Field(
        True, description="demonstrations run the tests before answering (False: edit, answer)"
    )
    sft_read_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of oracle demonstrations that read the lines around a line the "
        "query quotes in a file it names before editing (a skippable turn: both styles in SFT, "
        "for RL with rollout.turn_cost to choose)",
    )

    sft_recover_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of oracle demonstrations whose first edit is refused (a wrong "
        "old_str, not trained on) and which then read the lines and edit again: what to do "
        "after an error, instead of answering as if the edit was made",
    )
    sft_verify_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of oracle demonstrations that run the failing tests the query names "
        "after the edit and quote the passing line in the answer (instead of sft_run_tests' "
        "whole suite)",
    )
    sft_retry_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the verifying demonstrations (sft_verify_share) that make a "
        "plausible wrong fix first (not trained on), run the test, see it fail and fix it right",
    )

    def sft_lr_of(self, step: int) -> float:
        """The LR of SFT step ``step`` (0-based) of ``sft_steps``: ``sft_lr``, ``sft_lr_decay``."""
        return lr_at(step, self.sft_steps, self.sft_lr, self.warmup_frac, self.sft_lr_decay)

    def rl_lr_of(self, step: int) -> float:
        """The LR of RL step ``step`` (0-based) of ``steps``: ``lr``, ``lr_decay``."""
        return lr_at(step, self.steps, self.lr, self.warmup_frac, self.lr_decay)


class TrainRunConfig(_Section):
    run: RunSection = Field(default_factory=RunSection)
    model: ModelSection = Field(default_factory=ModelSection)
    tasks: TasksSection = Field(default_factory=TasksSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    train: TrainSection = Field(default_factory=TrainSection)
    grader: GraderConfig = Field(default_factory=GraderConfig)

    @property
    def run_dir(self) -> Path:
        return self.run.out_dir / self.run.name

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=1))


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare word is a string


def load_config(path: Path | None, overrides: list[str] = ()) -> TrainRunConfig:
    """Read ``path`` (TOML, or a bundled config's name), apply ``section.key=value`` overrides,
    validate; errors name the key."""
    if path is not None and not (path := bundled.config_file(path)).is_file():
        raise ConfigError(bundled.missing(path, "config file", bundled.CONFIGS, ".toml"))
    data: dict[str, Any] = read_toml(path) if path is not None else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        *path, name = key.strip().split(".")
        table = data
        for part in path:  # train.loss.clip_high: nested tables
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(f"override {item!r}: {part!r} is a value, not a table")
        table[name] = _parse_value(raw.strip())
    return validate(TrainRunConfig, data, "config")
