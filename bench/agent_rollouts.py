"""Agent-shaped rollouts: ``LocalEngine`` with and without prefix reuse, and batched HF ``generate``.

    python bench/agent_rollouts.py            # default model: 4 groups x 8 rollouts x 3 turns
    python bench/agent_rollouts.py --quick    # 1 group, 2 turns: sized for < 3 min on 2 idle cores
    python bench/agent_rollouts.py --model tiny --groups 2 --turns 2 --max-tokens 8

What it measures: the rollout throughput an RL step sees. Each group is G=8 samples of one
task from the bundled curriculum; each rollout is an asyncio task that sends turn 1
(the harness's real system prompt with the default tools, then the task's query), awaits the
reply, appends it (its sampled ids verbatim, as the harness does) and a tool result, and sends
the next turn. A tool result is ``read_file`` output of files from the task's snapshot repo
(numbered lines, ``<tool_result>`` blocks as ``render_results`` writes them), cut to a
seeded random 100-800 tokens (``--tool-tokens``); it does not depend on the reply, so all
three configurations send prompts of the same lengths (generate's replies are other ids). Every turn samples at
temperature 1.0 with a seed per rollout and turn, exactly ``--max-tokens`` new tokens.

The same workload, one configuration after another in one process:

- reuse: ``LocalEngine`` as shipped (prefix cache on, ``max_batch`` = all rollouts);
- no-reuse: the same engine with ``prefix_cache_tokens=0``;
- generate: HF ``model.generate``, the fair batched baseline: for each group and turn, the
  group's 8 prompts in one left-padded call (``min_new_tokens`` = ``max_new_tokens``, so the
  end token is masked rather than ignored); groups one after another. It batches a group but
  has no continuous batching and no prefix reuse; one RNG seed per call, not per row.

Reported per configuration: rollout tokens/s (generated tokens / wall time from the first
request to the last reply), prompt tokens prefilled and reused (``LocalEngine.stats()``; for
generate every prompt token is computed, plus the left padding, counted apart), the median
time to first token, and where the wall time went. Time to first token, engine: from
``engine.stream`` being called to its first ``TokenEvent``, so it includes waiting for the
running step to end and for room in the batch, as a rollout sees it. Generate: from the call
to the first call of a pass-through logits processor (the prefill forward has run; sampling
the first token is not included), the same for all 8 rows of the call. The time breakdown,
engine: the engine thread's time in ``KVBatch.prefill`` (forward over uncached tokens,
copying cached KV in, merging into the batch), ``KVBatch.decode``, sampling with its
bookkeeping, and storing KV in the prefix cache, timed by wrapping those methods on the
instance (private attributes; a benchmark may); "other" is the rest of the wall time:
scheduling, dropping rows, and gaps while rollouts tokenize their next prompt. Generate:
prefill as above, decode the rest of each call, "other" is building prompts between calls.
Replies of reuse and no-reuse are compared: with the same seeds they match unless float
rounding of the cached KV flips a sample.

Where the time goes (default sizes, idle 2 cores; BENCHMARKS.md has the run): without reuse,
prefill is 85% of the wall time (every turn re-runs the ~1,100-token system prompt and the
conversation so far); with reuse 81% of prompt tokens come from the cache, and prefill of the
rest (new tool results and replies) is still 59% of a 2.8x shorter run, decode 28%, sampling
with its bookkeeping 9%. A computed prompt token costs more with reuse (2.5 vs 1.9 ms): short
suffixes attend over long cached contexts and cached KV is copied in; this benchmark does
not separate those. The parts are engine-thread wall time: they include waits for the GIL
while the event loop tokenizes the next prompts. Configurations run minutes apart, so on a
shared machine they see different load: read the ratios from a run on idle cores.

Left out: tool execution time (tool results are ready at once), replies that end early or
differ in length, rollouts with different turn counts, GPU runs, and repeats or interleaving
of the configurations: on a busy machine even the ratios move with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from cheetah.bundled import TASK_SETS
from cheetah.harness.loop import system_prompt
from cheetah.harness.protocol import ToolResult, render_results
from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import Completion, SamplingParams
from cheetah.model.chat import prompt_token_ids
from cheetah.model.loading import load_model
from cheetah.tasks.loaders import load_tasks
from cheetah.tools import default_tools

G = 8  # rollouts per group
TASKS = TASK_SETS / "curriculum.jsonl"
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".json", ".yaml", ".yml"}
FULL = {"groups": 4, "turns": 3, "max_tokens": 48, "tool_tokens": "100,800"}
QUICK = {"groups": 1, "turns": 2, "max_tokens": 16, "tool_tokens": "100,400"}


@dataclass(frozen=True)
class Rollout:
    group: int
    index: int  # within its group
    seed: int
    query: str
    tool_results: tuple[str, ...]  # the user message after turn t, for t < turns - 1


@dataclass
class Result:
    """One configuration's run over the whole workload."""

    name: str
    wall_s: float = 0.0
    generated: int = 0
    prompt_tokens: int = 0
    reused: int = 0
    padding: int = 0  # generate only: pad positions its forwards computed
    first_token_s: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # where the wall time went
    replies: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    prompt_lengths: list[int] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.wall_s


# -- workload ---------------------------------------------------------------------------


def read_file_output(path: Path) -> str:
    """The file as the ``read_file`` tool shows it: numbered lines."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(lines, 1))


def tool_message(tok: Any, files: list[Path], n_tokens: int, rng: random.Random) -> str:
    """``read_file`` results of random files of the repo, cut after ``n_tokens`` tokens."""
    results: list[ToolResult] = []
    left = n_tokens
    for path in rng.sample(files, len(files)):
        text = read_file_output(path)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) > left:
            text = tok.decode(ids[:left])
        results.append(ToolResult(index=len(results), name="read_file", output=text))
        left -= min(len(ids), left)
        if left == 0:
            break
    return render_results(results)


def build_workload(tok: Any, groups: int, turns: int, tool_tokens: tuple[int, int], seed: int):
    """``groups`` tasks (seeded choice), G rollouts each, with their tool results fixed."""
    tasks = [t for t in load_tasks(TASKS) if t.snapshot.dir]
    chosen = random.Random(seed).sample(tasks, groups)
    rollouts = []
    for g, task in enumerate(chosen):
        root = Path(task.snapshot.dir)
        files = sorted(
            p
            for p in root.rglob("*")
            if p.is_file() and p.suffix in TEXT_SUFFIXES and p.stat().st_size
        )
        for i in range(G):
            rng = random.Random(f"{seed}-{g}-{i}")
            results = tuple(
                tool_message(tok, files, rng.randint(*tool_tokens), rng) for _ in range(turns - 1)
            )
            rollouts.append(Rollout(g, i, seed * 10_000 + g * G + i, task.query, results))
    return rollouts


def first_messages(rollout: Rollout, system: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": rollout.query}]


def append_turn(messages: list[dict[str, Any]], ids: list[int], text: str, tool: str) -> None:
    """The reply (sampled ids verbatim, as the harness keeps them), then the tool result."""
    messages.append({"role": "assistant", "content": text, "token_ids": list(ids)})
    messages.append({"role": "user", "content": tool})


# -- LocalEngine ------------------------------------------------------------------------


class StepClock:
    """Seconds the engine thread spends in parts of its step, by wrapping them on the instance
    (only the engine thread calls them; none of them calls another)."""

    def __init__(self, engine: LocalEngine) -> None:
        self.seconds = {"prefill": 0.0, "decode": 0.0, "sample": 0.0, "cache store": 0.0}
        batch = engine._batch
        batch.prefill = self._timed("prefill", batch.prefill)
        batch.decode = self._timed("decode", batch.decode)
        engine._sample_and_update = self._timed("sample", engine._sample_and_update)
        engine._remember = self._timed("cache store", engine._remember)

    def _timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start

        return wrapper


async def engine_rollout(
    engine: LocalEngine, tok: Any, r: Rollout, system: str, turns: int, n_tokens: int, out: Result
) -> None:
    messages = first_messages(r, system)
    for turn in range(turns):
        prompt = prompt_token_ids(messages, tok)
        out.prompt_lengths.append(len(prompt))
        params = SamplingParams(
            temperature=1.0, max_tokens=n_tokens, ignore_eos=True, seed=r.seed * 100 + turn
        )
        start = time.perf_counter()
        first = None
        done = None
        async for item in engine.stream(prompt, params, with_text=False):
            first = first if first is not None else time.perf_counter() - start
            if isinstance(item, Completion):
                done = item
        assert done is not None and first is not None
        out.first_token_s.append(first)
        out.generated += len(done.token_ids)
        out.replies[(r.group, r.index, turn)] = done.token_ids
        if turn + 1 < turns:
            append_turn(messages, done.token_ids, done.text, r.tool_results[turn])


async def run_engine(
    name: str, engine: LocalEngine, tok: Any, rollouts: list[Rollout], args: argparse.Namespace
) -> Result:
    system = system_prompt([t.spec for t in default_tools().values()])
    warm = prompt_token_ids([{"role": "user", "content": "Say hello."}], tok)  # shares nothing
    await engine.generate(warm, SamplingParams(max_tokens=4, ignore_eos=True))
    clock = StepClock(engine)
    before = engine.stats()
    out = Result(name)
    start = time.perf_counter()
    await asyncio.gather(
        *[
            engine_rollout(engine, tok, r, system, args.turns, args.max_tokens, out)
            for r in rollouts
        ]
    )
    out.wall_s = time.perf_counter() - start
    after = engine.stats()
    out.prompt_tokens = after.prompt_tokens - before.prompt_tokens
    out.reused = after.prompt_tokens_reused - before.prompt_tokens_reused
    out.seconds = dict(clock.seconds)
    out.seconds["other"] = out.wall_s - sum(clock.seconds.values())
    engine.close()
    return out


# -- HF generate, batched per group -----------------------------------------------------


class FirstLogits(LogitsProcessor):
    """Passes scores through; notes when it is first called (the prefill forward is done)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.at = self.at or time.perf_counter()
        return scores


def run_generate(model: Any, tok: Any, rollouts: list[Rollout], args: argparse.Namespace) -> Result:
    system = system_prompt([t.spec for t in default_tools().values()])
    pad = int(tok.pad_token_id)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}

    def call(prompts: list[list[int]], n_tokens: int, seed: int) -> tuple[torch.Tensor, float]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        torch.manual_seed(seed)
        first = FirstLogits()
        start = time.perf_counter()
        with torch.inference_mode():
            full = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n_tokens,
                min_new_tokens=n_tokens,
                logits_processor=LogitsProcessorList([first]),
                **sampling,
            )
        assert first.at is not None
        return full[:, width:], first.at - start

    call([prompt_token_ids([{"role": "user", "content": "Say hello."}], tok)], 4, 0)  # warm-up
    out = Result("generate")
    out.seconds = {"prefill": 0.0, "decode": 0.0}
    start = time.perf_counter()
    for g in sorted({r.group for r in rollouts}):
        group = [r for r in rollouts if r.group == g]
        messages = [first_messages(r, system) for r in group]
        for turn in range(args.turns):
            prompts = [prompt_token_ids(m, tok) for m in messages]
            call_start = time.perf_counter()
            new, first = call(prompts, args.max_tokens, group[0].seed * 100 + turn)
            out.seconds["prefill"] += first
            out.seconds["decode"] += time.perf_counter() - call_start - first
            out.first_token_s += [first] * len(group)
            out.prompt_lengths += [len(p) for p in prompts]
            out.prompt_tokens += sum(len(p) for p in prompts)
            out.padding += len(prompts) * max(len(p) for p in prompts) - sum(map(len, prompts))
            for r, m, row in zip(group, messages, new.tolist(), strict=True):
                out.generated += len(row)
                out.replies[(r.group, r.index, turn)] = row
                if turn + 1 < args.turns:
                    text = tok.decode(row, skip_special_tokens=True)
                    append_turn(m, row, text, r.tool_results[turn])
    out.wall_s = time.perf_counter() - start
    out.seconds["other"] = out.wall_s - out.seconds["prefill"] - out.seconds["decode"]
    return out


# -- report -----------------------------------------------------------------------------


def table(results: list[Result]) -> list[str]:
    parts = ["prefill", "decode", "sample", "cache store", "other"]
    head = (
        f"{'config':>8} | {'tok/s':>6} | {'wall s':>6} | {'prefilled':>9} | {'reused':>6} | "
        f"{'hit':>5} | {'TTFT s':>6} | " + " ".join(f"{p:>11}" for p in parts)
    )
    lines = [
        f"{'':>8} | {'':>6} | {'':>6} | {'prompt tokens':^26} | {'median':>6} | "
        "wall time by part, s",
        head,
        "-" * len(head),
    ]
    for r in results:
        computed = r.prompt_tokens - r.reused
        seconds = " ".join(
            f"{r.seconds[p]:>11.1f}" if p in r.seconds else f"{'-':>11}" for p in parts
        )
        lines.append(
            f"{r.name:>8} | {r.tokens_per_s:>6.1f} | {r.wall_s:>6.1f} | {computed:>9} | "
            f"{r.reused:>6} | {r.reused / r.prompt_tokens:>5.0%} | "
            f"{statistics.median(r.first_token_s):>6.2f} | {seconds}"
        )
    return lines


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="default, tiny, or a model path")
    parser.add_argument("--groups", type=int, help=f"tasks, {G} rollouts each (default 4)")
    parser.add_argument("--turns", type=int, help="turns per rollout (default 3)")
    parser.add_argument("--max-tokens", type=int, help="new tokens per turn (default 48)")
    parser.add_argument(
        "--tool-tokens", help="MIN,MAX tokens of a tool result, drawn per turn (default 100,800)"
    )
    parser.add_argument("--quick", action="store_true", help="1 group, 2 turns, 16 tokens/turn")
    parser.add_argument("--seed", type=int, default=0, help="tasks, tool results, sampling")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    low, high = (int(x) for x in args.tool_tokens.split(","))

    print("$ " + shlex.join(["python", "bench/agent_rollouts.py", *(argv or sys.argv[1:])]))
    loaded = load_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    model.generation_config.pad_token_id = tok.pad_token_id
    rollouts = build_workload(tok, args.groups, args.turns, (low, high), args.seed)
    load_before = os.getloadavg()[0]

    results = []
    for name, cache in (("reuse", None), ("no-reuse", 0)):
        kwargs = {} if cache is None else {"prefix_cache_tokens": cache}
        engine = LocalEngine(model, tok, max_batch=len(rollouts), **kwargs)
        results.append(await run_engine(name, engine, tok, rollouts, args))
        print(f"  {name}: {results[-1].tokens_per_s:.1f} tok/s", flush=True)
    results.append(run_generate(model, tok, rollouts, args))
    print(f"  generate: {results[-1].tokens_per_s:.1f} tok/s", flush=True)
    reuse, no_reuse, generate = results

    lengths = reuse.prompt_lengths
    same = sum(reuse.replies[k] == no_reuse.replies[k] for k in reuse.replies)
    print(
        f"model {loaded.name}: {args.groups} groups x {G} rollouts x {args.turns} turns, "
        f"{args.max_tokens} new tokens per turn, temperature 1.0, tool results {low}-{high} "
        f"tokens, prompts {min(lengths)}-{max(lengths)} tokens; torch {torch.__version__} on "
        f"{torch.get_num_threads()} CPU threads"
    )
    print(
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
        f"({os.cpu_count()} cores; other work on them lowers all sides unevenly)"
    )
    print("\n".join(table(results)))
    print(
        f"generate also computed {generate.padding} padding positions; replies identical "
        f"with and without reuse: {same}/{len(reuse.replies)}"
    )
    print(
        f"reuse/no-reuse {reuse.tokens_per_s / no_reuse.tokens_per_s:.2f}x  "
        f"reuse/generate {reuse.tokens_per_s / generate.tokens_per_s:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
