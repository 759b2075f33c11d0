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

Prefix reuse (``--prefix-requests N``, 0 skips it): N agent prompts (the harness's real
system prompt with the default tools, ~1,100 tokens, then a distinct short user query) sent
at once, ``--max-tokens`` each, to an engine without the prefix cache and to one with it, in
the same run. "cold" is the cache's first batch (one request prefills the shared prefix, the
others reuse it within the same step); "warm" is a second batch of new queries once the
system prompt is cached, which is what every RL step after the first sees. Greedy outputs of
both engines are compared token for token.

Left out: latency percentiles, GPU runs.
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

from cheetah.harness.loop import system_prompt
from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import Completion, SamplingParams
from cheetah.model.chat import prompt_token_ids
from cheetah.model.loading import load_model
from cheetah.tools import default_tools

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


def agent_prompts(tokenizer, n: int, first: int = 0) -> list[list[int]]:
    """The harness's system prompt, then a distinct short query: one shared ~1,100-token prefix."""
    system = system_prompt([t.spec for t in default_tools().values()])
    return [
        prompt_token_ids(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} (ticket {i})"},
            ],
            tokenizer,
        )
        for i in range(first, first + n)
    ]


async def timed(
    engine: LocalEngine, batch: list[list[int]], n_tokens: int
) -> tuple[float, float, list[Completion]]:
    """Seconds until every request has its first token (prefill), until all are done; results."""
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    start = time.perf_counter()

    async def one(prompt: list[int]) -> tuple[float, Completion]:
        first = None
        async for item in engine.stream(prompt, params, with_text=False):
            first = first or time.perf_counter() - start
            if isinstance(item, Completion):
                return first, item
        raise RuntimeError("the stream ended without a completion")

    done = await asyncio.gather(*[one(p) for p in batch])
    return max(f for f, _ in done), time.perf_counter() - start, [c for _, c in done]


async def prefix_reuse(model, tok, n: int, n_tokens: int, repeat: int) -> list[str]:
    """Lines of the prefix-reuse table: cache off, cold and warm (see the module docstring)."""
    cold, warm = agent_prompts(tok, n), agent_prompts(tok, n, first=n)
    shared = next(
        i for i, column in enumerate(zip(*cold, *warm, strict=False)) if len(set(column)) > 1
    )
    off = LocalEngine(model, tok, max_batch=n, prefix_cache_tokens=0)
    await timed(off, prompts(tok, 1), 4)  # warm-up, a prompt that shares nothing with the rest
    best: dict[tuple[str, str], tuple[float, float]] = {}  # (batch, side): least (first, done)
    tokens: dict[str, tuple[int, int]] = {}  # batch: (prompt tokens, reused)
    same = compared = 0
    worst = 0.0
    for _ in range(repeat):  # interleaved, so a busy moment hits both sides alike
        on = LocalEngine(model, tok, max_batch=n)  # an empty cache every time
        await timed(on, prompts(tok, 1), 4)
        for label, batch in (("cold", cold), ("warm", warm)):
            *off_times, outs_off = await timed(off, batch, n_tokens)
            before = on.stats()
            *on_times, outs_on = await timed(on, batch, n_tokens)
            after = on.stats()
            tokens[label] = (
                after.prompt_tokens - before.prompt_tokens,
                after.prompt_tokens_reused - before.prompt_tokens_reused,
            )
            for side, times in (("off", off_times), ("on", on_times)):
                old = best.get((label, side), (float("inf"), float("inf")))
                best[(label, side)] = (min(old[0], times[0]), min(old[1], times[1]))
            for a, b in zip(outs_off, outs_on, strict=True):
                compared += 1
                if a.token_ids == b.token_ids:
                    same += 1
                    diffs = (abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
                    worst = max(worst, *diffs)
        on.close()
    off.close()
    rows = []
    for label in ("cold", "warm"):
        (first_off, done_off), (first_on, done_on) = best[(label, "off")], best[(label, "on")]
        total, reused = tokens[label]
        rows.append(
            f"{label:>5} | {first_off:>7.2f} {first_on:>7.2f} {first_off / first_on:6.2f}x | "
            f"{done_off:>7.2f} {done_on:>7.2f} {done_off / done_on:6.2f}x | "
            f"{total - reused:>9} | {reused:>6} | {reused / total:8.1%}"
        )
    lengths = [len(p) for p in cold + warm]
    return [
        f"prefix reuse: {n} requests at once, prompts {min(lengths)}-{max(lengths)} tokens "
        f"sharing the first {shared}, {n_tokens} new tokens each, greedy, best of {repeat}",
        "      | all first tokens, s    | all done, s            | prompt tokens",
        f"{'batch':>5} | {'off':>7} {'on':>7} {'ratio':>7} | {'off':>7} {'on':>7} {'ratio':>7} | "
        f"{'prefilled':>9} | {'reused':>6} | hit rate",
        f"{'-' * 5}-+-{'-' * 23}-+-{'-' * 23}-+-{'-' * 9}-+-{'-' * 6}-+---------",
        *rows,
        f"greedy outputs identical with and without the cache: {same}/{compared}; "
        f"max |logprob difference| {worst:.1e}",
    ]


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="default, tiny, or a model path")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measure each side this often, keep the best"
    )
    parser.add_argument(
        "--prefix-requests", type=int, default=16, help="requests of the prefix-reuse case"
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
    reuse = []
    if args.prefix_requests:
        reuse = await prefix_reuse(model, tok, args.prefix_requests, args.max_tokens, args.repeat)

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
    if args.prefix_requests:
        print()
        print("\n".join(reuse))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
