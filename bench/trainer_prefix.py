"""Trainer step time with and without running each micro-batch's shared prefix once.

    python bench/trainer_prefix.py                     # the shipped config's trainer settings
    python bench/trainer_prefix.py --micro-batch-tokens 4096 --no-grad-checkpointing

Builds ``--samples`` SFT samples that share the real system prompt (the tool descriptions)
and one user query, padded to ``--prefix`` tokens, each followed by its own ``--suffix``
tokens: an assistant turn, a tool result, a second assistant turn; ``--trained`` of them
are assistant tokens. Then times ``Trainer.sft_step`` with ``share_prefix`` off and on in
the same run and process, one trainer each (two copies of the weights), steps interleaved so
that other load on the machine hits both alike: one warm-up step each, then the median of
``--repeat``. Both start from the same weights and see the same samples; the warm-up
losses are printed as a check that both computed the same thing. "step memory" is the peak
RSS during a step above the RSS before it (the most over the timed steps; Linux only).

Left out: RL steps (same forward and backward, another loss), GPU runs, groups that share
the user query but not the system prompt.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = [
    "def",
    "return",
    "self",
    "value",
    "path",
    "file",
    "test",
    "error",
    "import",
    "class",
    "for",
    "in",
    "if",
    "else",
    "assert",
    "list",
    "dict",
    "str",
    "int",
    "None",
    "True",
    "False",
    "raise",
    "open",
    "read",
    "write",
    "line",
    "parse",
    "config",
    "result",
    "index",
]


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def build_samples(tokenizer, args) -> list:
    """``args.samples`` chat samples: the shared head (system prompt and a query padded to
    about ``args.prefix`` tokens), then assistant, tool result, assistant, sized for about
    ``args.suffix`` tokens of which about ``args.trained`` are trained (these words are
    about a token each)."""
    from cheetah.harness.loop import system_prompt
    from cheetah.model.chat import tokenize_chat
    from cheetah.rl.data import Sample
    from cheetah.tools import default_tools

    rng = random.Random(0)
    system = system_prompt([t.spec for t in default_tools().values()])
    head = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Fix the failing test in utils/dates.py."},
    ]
    while len(tokenize_chat(head, tokenizer).token_ids) < args.prefix:
        head[1]["content"] += " " + text(rng, 4)
    turn = max(1, args.trained // 2 - 1)  # + the trained end-of-turn token
    result = max(1, args.suffix - args.trained - 12)  # - role headers
    samples = []
    for _ in range(args.samples):
        tail = [
            {"role": "assistant", "content": text(rng, turn)},
            {"role": "user", "content": text(rng, result)},
            {"role": "assistant", "content": text(rng, turn)},
        ]
        chat = tokenize_chat(head + tail, tokenizer)
        samples.append(Sample(chat.token_ids, chat.loss_mask, [0.0] * len(chat.token_ids)))
    return samples


def step_memory_mb(step) -> tuple[float, float]:
    """Seconds of ``step()`` and the memory it needed above what was resident before: the
    peak RSS (reset through /proc/self/clear_refs, Linux) minus the RSS at its start."""
    clear = Path("/proc/self/clear_refs")
    clear.write_text("5")
    before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    return seconds, (_status_kb("VmHWM") - before) / 1024


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="default, tiny, or a model path")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=1200, help="shared tokens per sample")
    parser.add_argument("--suffix", type=int, default=200, help="own tokens per sample")
    parser.add_argument("--trained", type=int, default=60, help="trained tokens per sample")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument(
        "--precision", choices=("auto", "fp32", "bf16"), default="auto", help="train.precision"
    )
    parser.add_argument("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)

    import torch

    from cheetah.model.loading import load_model
    from cheetah.rl.batching import micro_batches, shared_prefix_len
    from cheetah.rl.trainer import TrainConfig, Trainer

    loaded = load_model(args.model)
    samples = build_samples(loaded.tokenizer, args)
    trainers = {}
    for share in (False, True):
        cfg = TrainConfig(
            lr=1e-5,
            micro_batch_tokens=args.micro_batch_tokens,
            precision=args.precision,
            grad_checkpointing=args.grad_checkpointing,
            share_prefix=share,
        )
        model = copy.deepcopy(loaded.model) if not share else loaded.model
        trainers["on" if share else "off"] = Trainer(model, loaded.tokenizer, cfg)
    load_before = os.getloadavg()[0]
    # warm-up, from the same weights: the losses must agree
    losses = {mode: t.sft_step(samples).loss for mode, t in trainers.items()}
    times: dict[str, list[float]] = {mode: [] for mode in trainers}
    memory: dict[str, float] = dict.fromkeys(trainers, 0.0)
    for _ in range(args.repeat):  # interleaved, so a busy moment hits both sides alike
        for mode, trainer in trainers.items():
            seconds, mb = step_memory_mb(lambda t=trainer: t.sft_step(samples))
            times[mode].append(seconds)
            memory[mode] = max(memory[mode], mb)

    tokens = [len(s.input_ids) for s in samples]
    trained = [s.trained_tokens for s in samples]
    print("$ " + shlex.join(["python", "bench/trainer_prefix.py", *(argv or sys.argv[1:])]))
    print(
        f"model {loaded.name}, {len(samples)} samples of {min(tokens)}-{max(tokens)} tokens "
        f"sharing {shared_prefix_len(samples)}, {min(trained)}-{max(trained)} trained each; "
        f"micro_batch_tokens {args.micro_batch_tokens}, precision {args.precision} -> "
        f"{trainers['on'].precision.dtype}, "
        f"grad_checkpointing {args.grad_checkpointing}"
    )
    print(
        f"torch {torch.__version__} on {torch.get_num_threads()} CPU threads; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)"
    )
    print(
        f"{'share_prefix':>12} | {'micro-batches':>13} | step s, median of {args.repeat} | "
        "min-max s | step memory MB | warm-up loss"
    )
    for mode in trainers:
        sizes = [len(g) for g in micro_batches(samples, args.micro_batch_tokens, mode == "on")]
        t = times[mode]
        print(
            f"{mode:>12} | {sizes!s:>13} | {statistics.median(t):>20.2f} | "
            f"{min(t):.2f}-{max(t):.2f} | {memory[mode]:>14.0f} | {losses[mode]:.6f}"
        )
    ratio = statistics.median(times["off"]) / statistics.median(times["on"])
    print(f"speedup (off / on, medians): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
