"""Aggregate decode throughput: ``LocalEngine`` against HF ``generate`` called per request.

    python bench/engine.py                      # the default model (SmolLM2-135M-Instruct)
    python bench/engine.py --model tiny --max-tokens 32

For each concurrency level N, N chat prompts are sent at once to a ``LocalEngine`` (one
continuous batch) and, in the same run, served by ``model.generate`` one request at a time,
which is what a server without batching does; running N ``generate`` calls in threads on the
same cores only makes them fight for them. Both sides decode greedily and ignore the end
token, so every request produces exactly ``--max-tokens`` tokens and tokens/s compare like
for like. The first request of each side is a warm-up and is not timed. On a shared machine
use ``--repeat 3``: each side keeps its best of three interleaved measurements.

Left out: latency percentiles, prompt-heavy workloads, GPU runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import SamplingParams
from cheetah.model.chat import prompt_token_ids
from cheetah.model.loading import load_model

QUESTIONS = [
    "Write a Python function that reverses a linked list.",
    "What does `git rebase -i` do?",
    "Explain the difference between a process and a thread.",
    "How do I read a JSON file in Python?",
    "Fix this bug: `for i in range(len(xs)): xs.remove(xs[i])`",
    "What is a race condition? Give a short example.",
    "Write a SQL query that counts users per country.",
    "Why is my recursive Fibonacci function slow?",
]


def prompts(tokenizer, n: int) -> list[list[int]]:
    return [
        prompt_token_ids([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], tokenizer)
        for i in range(n)
    ]


async def engine_tokens_per_s(engine: LocalEngine, batch: list[list[int]], n_tokens: int) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    start = time.perf_counter()
    outs = await asyncio.gather(*[engine.generate(p, params) for p in batch])
    wall = time.perf_counter() - start
    return sum(len(o.token_ids) for o in outs) / wall


def hf_tokens_per_s(model, batch: list[list[int]], n_tokens: int) -> float:
    produced = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for prompt in batch:
            ids = torch.tensor([prompt])
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n_tokens,
                min_new_tokens=n_tokens,
                do_sample=False,
            )
            produced += out.shape[1] - ids.shape[1]
    return produced / (time.perf_counter() - start)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="default, tiny, or a model path")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measure each side this often, keep the best"
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]

    loaded = load_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    model.generation_config.pad_token_id = tok.pad_token_id
    engine = LocalEngine(model, tok, max_batch=max(levels))
    await engine_tokens_per_s(engine, prompts(tok, 1), 4)  # warm-up
    hf_tokens_per_s(model, prompts(tok, 1), 4)

    load_before = os.getloadavg()[0]
    rows = []
    for n in levels:
        batch = prompts(tok, n)
        ours = theirs = 0.0
        for _ in range(args.repeat):  # interleaved, so a busy moment hits both sides alike
            ours = max(ours, await engine_tokens_per_s(engine, batch, args.max_tokens))
            theirs = max(theirs, hf_tokens_per_s(model, batch, args.max_tokens))
        rows.append((n, ours, theirs))
        print(f"  N={n}: engine {ours:.1f} tok/s, hf generate {theirs:.1f} tok/s", flush=True)
    engine.close()

    print()
    print("$ " + shlex.join(["python", "bench/engine.py", *(argv or sys.argv[1:])]))
    print(
        f"model {loaded.name}, {args.max_tokens} new tokens per request, greedy, "
        f"best of {args.repeat}, torch {torch.__version__} on {torch.get_num_threads()} CPU threads"
    )
    print(
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
        f"({os.cpu_count()} cores; other work on them lowers both sides unevenly)"
    )
    print(f"{'concurrent':>10} | {'LocalEngine tok/s':>17} | {'HF generate tok/s':>17} | ratio")
    print(f"{'-' * 10}-+-{'-' * 17}-+-{'-' * 17}-+------")
    for n, ours, theirs in rows:
        print(f"{n:>10} | {ours:>17.1f} | {theirs:>17.1f} | {ours / theirs:4.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
