"""Agent-shaped rollouts: ``LocalEngine`` (fp32, bf16, without prefix reuse), batched HF
``generate``, and llama.cpp's servers: llama-cpp-python's and the C++ ``llama-server``.

    python bench/agent_rollouts.py            # default model: 4 groups x 8 rollouts x 3 turns
    python bench/agent_rollouts.py --quick    # 1 group, 2 turns: sized for < 3 min on 2 idle cores
    python bench/agent_rollouts.py --model tiny --groups 2 --turns 2 --max-tokens 8
    python bench/agent_rollouts.py --configs reuse,llama.cpp --workloads single,group
    LLAMA_SERVER=/path/to/llama-server python bench/agent_rollouts.py --configs reuse,llama-server

What it measures: the rollout throughput an RL step sees. Each group is G=8 samples of one
task from the bundled curriculum; each rollout is an asyncio task that sends turn 1
(the harness's real system prompt with the default tools, then the task's query), awaits the
reply, appends it (its sampled ids verbatim, as the harness does) and a tool result, and sends
the next turn. A tool result is ``read_file`` output of files from the task's snapshot repo
(numbered lines, ``<tool_result>`` blocks as ``render_results`` writes them), cut to a
seeded random 100-800 tokens (``--tool-tokens``); it does not depend on the reply, so all
configurations send prompts of about the same lengths (their replies are other ids; llama.cpp's
are re-tokenized from text). Every turn samples at temperature 1.0 with a seed per rollout and
turn, exactly ``--max-tokens`` new tokens.

Workloads (``--workloads``), each run by every configuration: ``single``, the first rollout
alone (one stream, turn after turn); ``group``, the first group's 8 rollouts, sharing their
prompt; ``agent``, all groups at once (the same as ``group`` when there is one group, so it is
then skipped). By default every configuration runs every workload: at default sizes that is
well over half an hour; pick with the flags. The configurations (``--configs``), one after
another in one process:

- reuse: ``LocalEngine`` as shipped (prefix cache on, ``max_batch`` = all rollouts), fp32;
- reuse-bf16: the same on a bf16 copy of the model (KV cache and prefix cache in bf16 too;
  sampling upcasts the logits to fp32). The engine has no dtype flag: it runs the model as
  given, so the bench casts it;
- no-reuse: the fp32 engine with ``prefix_cache_tokens=0``;
- generate: HF ``model.generate``, the fair batched baseline: for each group and turn, the
  group's 8 prompts in one left-padded call (``min_new_tokens`` = ``max_new_tokens``, so the
  end token is masked rather than ignored); groups one after another. It batches a group but
  has no continuous batching and no prefix reuse; one RNG seed per call, not per row;
- llama.cpp: ``python -m llama_cpp.server`` (llama-cpp-python, the ``bench`` extra) started as
  a subprocess on the same GGUF file the default model is converted from, so it computes with
  the Q4_1 weights as stored (activations quantized to 8 bits for the dot products, f16 KV),
  where cheetah computes with weights dequantized to fp32 (or cast on to bf16). Its server
  holds one ``Llama`` context behind a lock: requests run one at a time, in arrival order, with
  no batching across rollouts (it has no slots or ``n_parallel``; see llama-server). Reuse comes from its prompt cache
  (``--cache``: after each request the context's state is saved in RAM keyed by its tokens,
  and the longest-prefix entry is loaded for the next request) and from the context still
  holding the previous request's tokens. ``n_ctx`` is the model's context (every conversation
  fits), ``n_threads`` the CPU count, ``logits_all`` off (no logits for prompt positions),
  ``OMP_WAIT_POLICY=passive`` unless set (see ``cheetah/inference/llama_cpp_server.py``).
  Each rollout is an asyncio task sending ``/v1/completions`` requests, as many at once as the
  engine sees; the prompt is the text of the same chat rendered by the model's chat template
  (checked: the server's prompt token count equals the HF tokenizer's for that text; its
  replies enter the next prompt as text, as with any OpenAI-style server). Sampling matches:
  temperature 1.0, ``top_k`` 0, ``top_p`` 1, ``min_p`` 0, no repeat penalty, a seed per
  rollout and turn; it has no ``ignore_eos``, so the end-of-sequence and other special ids
  get a logit bias of -1e9 (masked, where the engine samples them and goes on) and ``max_tokens`` is the budget;
  replies that still came back short are counted. Prompt tokens computed and the prefill and
  decode time come from the server's own per-request timings (its log); "other" there is HTTP,
  the lock, saving and loading cache states, and sampling (with a logit bias, in Python).
  Requests are not streamed (so ``usage`` counts tokens exactly): no time to first token.
  Without ``llama_cpp`` installed, or for a model that is not a GGUF file (``tiny``), this
  configuration is skipped with a message.
- llama-server: llama.cpp's C++ server, as its users run it for many clients, on the same
  GGUF file (the binary from ``--llama-server PATH`` or ``LLAMA_SERVER``, else skipped; built
  from the llama.cpp source llama-cpp-python vendors, ``cmake --build ... --target
  llama-server``). A slot per concurrent rollout (``--parallel``), continuous batching (one
  batch per step holds every busy slot's next token and prompt chunks), each slot's KV cache
  kept between requests and its common prefix with the next prompt reused (``cache_prompt``;
  ``--cache-reuse 256`` also shifts matching chunks after a mismatch into place), idle slots
  copied to its RAM prompt cache (``--cache-ram``, on by default). A request goes to the idle
  slot whose tokens share the longest prefix with its prompt, so a rollout comes back to its
  own slot; slots share no KV, so a group's rollouts arriving at once each prefill the common
  system prompt. ``--ctx-size`` is the slots times the longest conversation (``slot_context``;
  the server splits it evenly), threads the CPU count, ``--load-mode none`` (no mmap), the same
  ``OMP_WAIT_POLICY``. Requests go to its native ``/completion`` with the same text prompts and
  sampling as llama.cpp, with ``ignore_eos`` (it masks the end-of-generation ids: every reply
  has exactly ``--max-tokens`` tokens) instead of a logit bias. Prompt tokens computed and the
  prefill and decode time come from each reply's ``timings``; when slots run at once these
  overlap, so they are printed as a note rather than as parts of the wall time.

Reported per configuration: rollout tokens/s (generated tokens / wall time from the first
request to the last reply), rollouts/s, the median and 95th percentile time per turn (request
sent to reply complete, waiting included; for generate the call that served the turn), prompt
tokens prefilled and reused (``LocalEngine.stats()``; for
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
differ in length (llama.cpp's short replies are counted, not redrawn), rollouts with
different turn counts, GPU runs, and repeats or interleaving of the configurations: on a busy
machine even the ratios move with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib.util
import os
import random
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from cheetah.bundled import TASK_SETS
from cheetah.harness.loop import system_prompt
from cheetah.harness.protocol import ToolResult, render_results
from cheetah.inference.llama_cpp_server import LlamaCppServer
from cheetah.inference.local import LocalEngine, _eos_ids
from cheetah.inference.protocol import Completion, SamplingParams
from cheetah.model.chat import prompt_token_ids
from cheetah.model.loading import default_gguf_path, load_model
from cheetah.tasks.loaders import load_tasks
from cheetah.tools import default_tools

G = 8  # rollouts per group
TASKS = TASK_SETS / "curriculum.jsonl"
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".json", ".yaml", ".yml"}
FULL = {"groups": 4, "turns": 3, "max_tokens": 48, "tool_tokens": "100,800"}
QUICK = {"groups": 1, "turns": 2, "max_tokens": 16, "tool_tokens": "100,400"}
CONFIGS = ("reuse", "reuse-bf16", "no-reuse", "generate", "llama.cpp", "llama-server")
WORKLOADS = ("single", "group", "agent")
COMPUTES_IN = {
    "reuse": "fp32 (Q4_1 weights dequantized at load)",
    "reuse-bf16": "bf16 (the fp32 weights cast; fp32 sampling)",
    "no-reuse": "fp32",
    "generate": "fp32",
    "llama.cpp": "Q4_1 weights as stored x 8-bit activations, f16 KV cache",
    "llama-server": "as llama.cpp, with flash attention (its default, auto, picks it on CPU)",
}


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
    rollouts: int = 0
    wall_s: float = 0.0
    generated: int = 0
    prompt_tokens: int = 0
    reused: int = 0
    padding: int = 0  # generate only: pad positions its forwards computed
    first_token_s: list[float] = field(default_factory=list)  # empty: not measured
    turn_s: list[float] = field(default_factory=list)  # request sent to reply complete
    seconds: dict[str, float] = field(default_factory=dict)  # where the wall time went
    replies: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    prompt_lengths: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.wall_s

    @property
    def rollouts_per_s(self) -> float:
        return self.rollouts / self.wall_s


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
        out.turn_s.append(time.perf_counter() - start)
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
    out = Result(name, rollouts=len(rollouts))
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
    out = Result("generate", rollouts=len(rollouts))
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
            out.turn_s += [time.perf_counter() - call_start] * len(group)
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


# -- llama.cpp: llama-cpp-python's Python server and the C++ llama-server ---------------

PERF_PROMPT = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
PERF_DECODE = re.compile(r":\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs")
SAMPLING = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}


def llama_cpp_gguf(spec: str) -> Path | None:
    """The GGUF file llama.cpp serves for ``--model``, or None where it has none."""
    if spec == "default":
        return default_gguf_path()
    return Path(spec) if spec.endswith(".gguf") else None


@dataclass(frozen=True)
class ServerReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    timings: dict[str, float] | None  # llama-server's; the Python server's are in its log


@dataclass(frozen=True)
class Flavor:
    """What differs between the two servers: command, endpoint, request body, reply."""

    name: str
    command: list[str]  # without --host and --port
    endpoint: str
    request: Callable[[str, int, int], dict[str, Any]]  # (prompt, seed, new tokens) -> body
    parse: Callable[[dict[str, Any]], ServerReply]


def python_server(gguf: Path, model: Any, tok: Any, args: argparse.Namespace) -> Flavor:
    """``python -m llama_cpp.server``: one context behind a lock, its prompt cache in RAM."""
    threads = str(os.cpu_count() or 1)
    n_ctx = str(getattr(model.config, "max_position_embeddings", 2048))
    banned = {str(i): -1e9 for i in {*_eos_ids(model, tok), *tok.all_special_ids}}
    return Flavor(
        "llama.cpp",
        [
            *(sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)),
            *("--n_ctx", n_ctx, "--n_threads", threads, "--n_threads_batch", threads),
            *("--cache", "true", "--cache_type", "ram", "--cache_size", str(8 << 30)),
            *("--logits_all", "false", "--interrupt_requests", "false", "--verbose", "true"),
        ],
        "/v1/completions",
        lambda prompt, seed, n_tokens: {
            **SAMPLING,
            "prompt": prompt,
            "seed": seed,
            "max_tokens": n_tokens,
            # no ignore_eos; it stops at any end-of-generation token (<|endoftext|> too)
            "logit_bias": banned,
        },
        lambda reply: ServerReply(
            reply["choices"][0]["text"],
            reply["usage"]["prompt_tokens"],
            reply["usage"]["completion_tokens"],
            None,
        ),
    )


def slot_context(tok: Any, rollouts: list[Rollout], system: str, args: argparse.Namespace) -> int:
    """Context per llama-server slot: the longest conversation with its replies counted at 4
    tokens per sampled token (re-tokenized text can be longer than the ids: a split UTF-8
    character comes back as U+FFFD, 3 byte tokens), rounded up to 256."""
    longest = 0
    for r in rollouts:
        messages = first_messages(r, system)
        for tool in r.tool_results:
            messages += [{"role": "assistant", "content": ""}, {"role": "user", "content": tool}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        longest = max(longest, len(tok(text, add_special_tokens=False)["input_ids"]))
    return -(-(longest + 4 * args.max_tokens * args.turns) // 256) * 256


def cpp_server(
    binary: str, gguf: Path, tok: Any, rollouts: list[Rollout], args: argparse.Namespace
) -> Flavor:
    """``llama-server``: a slot per concurrent rollout, batched together (continuous
    batching); each slot keeps its KV cache between requests (``cache_prompt``)."""
    threads = str(os.cpu_count() or 1)
    system = system_prompt([t.spec for t in default_tools().values()])
    parallel = len(rollouts)
    n_ctx = parallel * slot_context(tok, rollouts, system, args)  # split evenly across slots
    return Flavor(
        "llama-server",
        [
            *(binary, "--model", str(gguf), "--parallel", str(parallel), "--ctx-size", str(n_ctx)),
            *("--cont-batching", "--cache-reuse", "256", "--threads", threads),
            *("--threads-batch", threads, "--load-mode", "none", "--no-webui"),
        ],
        "/completion",
        lambda prompt, seed, n_tokens: {
            **SAMPLING,
            "prompt": prompt,
            "seed": seed,
            "n_predict": n_tokens,
            "ignore_eos": True,  # masks the end-of-generation ids: exactly n_predict tokens
            "cache_prompt": True,
        },
        lambda reply: ServerReply(
            reply["content"], reply["tokens_evaluated"], reply["tokens_predicted"], reply["timings"]
        ),
    )


async def server_rollout(
    client: httpx.AsyncClient,
    url: str,
    flavor: Flavor,
    tok: Any,
    r: Rollout,
    system: str,
    args: argparse.Namespace,
    out: Result,
    replies: list[ServerReply],
    checks: dict[str, int],
) -> None:
    messages = first_messages(r, system)
    for turn in range(args.turns):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        n_prompt = len(tok(text, add_special_tokens=False)["input_ids"])
        start = time.perf_counter()
        body = flavor.request(text, r.seed * 100 + turn, args.max_tokens)
        response = await client.post(url + flavor.endpoint, json=body)
        response.raise_for_status()
        reply = flavor.parse(response.json())
        out.turn_s.append(time.perf_counter() - start)
        replies.append(reply)
        out.prompt_lengths.append(reply.prompt_tokens)
        out.prompt_tokens += reply.prompt_tokens
        out.generated += reply.completion_tokens
        checks["prompt tokens differ"] += reply.prompt_tokens != n_prompt
        checks["short replies"] += reply.completion_tokens < args.max_tokens
        if turn + 1 < args.turns:
            messages.append({"role": "assistant", "content": reply.text})
            messages.append({"role": "user", "content": r.tool_results[turn]})


async def run_llama_server(
    flavor: Flavor, tok: Any, rollouts: list[Rollout], args: argparse.Namespace
) -> Result:
    system = system_prompt([t.spec for t in default_tools().values()])
    server = LlamaCppServer.from_command(flavor.command, flavor.name)
    log_file = Path(tempfile.mkstemp(prefix=f"{flavor.name}-", suffix=".log")[1])
    base_url = f"http://{server.host}:{server.port}"
    limits = httpx.Limits(max_connections=len(rollouts) + 1)
    out = Result(flavor.name, rollouts=len(rollouts))
    replies: list[ServerReply] = []
    checks = {"prompt tokens differ": 0, "short replies": 0}
    try:
        await asyncio.to_thread(server.start, 120.0, log_file)  # the log says why if not
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:
            warm = tok.apply_chat_template(
                [{"role": "user", "content": "Say hello."}],
                tokenize=False,
                add_generation_prompt=True,
            )
            warm_body = flavor.request(warm, 0, 4)
            (await client.post(base_url + flavor.endpoint, json=warm_body)).raise_for_status()
            log_start = len(log_file.read_text(errors="replace"))
            start = time.perf_counter()
            await asyncio.gather(
                *[
                    server_rollout(
                        client, base_url, flavor, tok, r, system, args, out, replies, checks
                    )
                    for r in rollouts
                ]
            )
            out.wall_s = time.perf_counter() - start
        log = log_file.read_text(errors="replace")[log_start:]
        log_file.unlink()
    finally:
        server.stop()
    if replies[0].timings is None:  # the Python server logs them
        prompt = [(float(ms), int(n)) for ms, n in PERF_PROMPT.findall(log)]
        decode_ms = [float(ms) for ms, _ in PERF_DECODE.findall(log)]
    else:
        prompt = [(t["prompt_ms"], int(t["prompt_n"])) for t in (r.timings for r in replies)]
        decode_ms = [r.timings["predicted_ms"] for r in replies]
    out.reused = out.prompt_tokens - sum(n for _, n in prompt)
    prefill_s, decode_s = sum(ms for ms, _ in prompt) / 1000, sum(decode_ms) / 1000
    overlap = flavor.name == "llama-server" and len(rollouts) > 1
    if overlap:  # requests in slots run at once: their times overlap, they do not split the wall
        out.notes.append(
            f"{flavor.name}: per-request prefill {prefill_s:.1f} s, decode {decode_s:.1f} s "
            "summed over requests that ran at once (not a split of the wall time)"
        )
    else:
        out.seconds = {"prefill": prefill_s, "decode": decode_s}
        out.seconds["other"] = out.wall_s - prefill_s - decode_s
    out.notes.append(
        f"{flavor.name}: {len(prompt)}/{len(rollouts) * args.turns} requests timed; server "
        f"prompt token count differs from HF's for the same text: "
        f"{checks['prompt tokens differ']}; replies short of {args.max_tokens} tokens: "
        f"{checks['short replies']}; "
        + shlex.join("python" if c == sys.executable else c for c in flavor.command)
    )
    return out


# -- report -----------------------------------------------------------------------------


def table(results: list[Result]) -> list[str]:
    parts = ["prefill", "decode", "sample", "cache store", "other"]
    head = (
        f"{'config':>10} | {'tok/s':>6} | {'roll/s':>6} | {'wall s':>6} | {'prefilled':>9} | "
        f"{'reused':>6} | {'hit':>4} | {'TTFT':>5} | {'p50':>5} | {'p95':>5} | "
        + " ".join(f"{p:>11}" for p in parts)
    )
    lines = [
        f"{'':>10} | {'':>6} | {'':>6} | {'':>6} | {'prompt tokens':^25} | {'median':>5} | "
        f"{'turn s':^11} | wall time by part, s",
        head,
        "-" * len(head),
    ]
    for r in results:
        computed = r.prompt_tokens - r.reused
        seconds = " ".join(
            f"{r.seconds[p]:>11.1f}" if p in r.seconds else f"{'-':>11}" for p in parts
        )
        ttft = f"{statistics.median(r.first_token_s):>5.2f}" if r.first_token_s else f"{'-':>5}"
        p95 = statistics.quantiles(r.turn_s, n=20)[-1] if len(r.turn_s) > 1 else r.turn_s[0]
        lines.append(
            f"{r.name:>10} | {r.tokens_per_s:>6.1f} | {r.rollouts_per_s:>6.3f} | "
            f"{r.wall_s:>6.1f} | {computed:>9} | {r.reused:>6} | "
            f"{r.reused / r.prompt_tokens:>4.0%} | {ttft} | "
            f"{statistics.median(r.turn_s):>5.2f} | {p95:>5.2f} | {seconds}"
        )
    return lines


def ratios(results: list[Result]) -> str:
    """``reuse/X`` throughput ratios, for every other configuration that ran beside reuse."""
    by_name = {r.name: r for r in results}
    base = by_name.get("reuse", results[0])
    return "  ".join(
        f"{base.name}/{r.name} {base.tokens_per_s / r.tokens_per_s:.2f}x"
        for r in results
        if r is not base
    )


def workloads(names: list[str], rollouts: list[Rollout]) -> list[tuple[str, list[Rollout]]]:
    chosen = {"single": rollouts[:1], "group": rollouts[:G], "agent": rollouts}
    out: list[tuple[str, list[Rollout]]] = []
    for name in names:
        if any(len(w) == len(chosen[name]) for _, w in out):
            print(f"workload {name}: the same rollouts as one before it; skipped")
            continue
        out.append((name, chosen[name]))
    return out


def pick(flag: str, value: str, allowed: tuple[str, ...]) -> list[str]:
    names = [v for v in value.split(",") if v]
    unknown = set(names) - set(allowed)
    if unknown or not names:
        raise SystemExit(f"{flag}: choose from {','.join(allowed)} (got {value!r})")
    return names


async def run_config(
    name: str, loaded: Any, bf16: Any, rollouts: list[Rollout], args: argparse.Namespace
) -> Result:
    model, tok = loaded.model, loaded.tokenizer
    if name == "generate":
        return run_generate(model, tok, rollouts, args)
    if name in ("llama.cpp", "llama-server"):
        gguf = llama_cpp_gguf(args.model)
        assert gguf is not None
        if name == "llama.cpp":
            flavor = python_server(gguf, model, tok, args)
        else:
            flavor = cpp_server(args.llama_server, gguf, tok, rollouts, args)
        return await run_llama_server(flavor, tok, rollouts, args)
    kwargs = {"prefix_cache_tokens": 0} if name == "no-reuse" else {}
    engine_model = bf16 if name == "reuse-bf16" else model
    engine = LocalEngine(engine_model, tok, max_batch=len(rollouts), **kwargs)
    return await run_engine(name, engine, tok, rollouts, args)


def runnable(configs: list[str], args: argparse.Namespace) -> list[str]:
    """Drops the llama.cpp servers, saying why, where they cannot run."""
    why = {}
    if importlib.util.find_spec("llama_cpp") is None:
        why["llama.cpp"] = "llama_cpp is not importable (pip install 'llama-cpp-python[server]')"
    if not (args.llama_server and os.access(args.llama_server, os.X_OK)):
        why["llama-server"] = (
            f"no llama-server binary at {args.llama_server!r} (build llama.cpp's llama-server "
            "target; pass --llama-server PATH or set LLAMA_SERVER)"
            if args.llama_server
            else "no llama-server binary given (--llama-server PATH or LLAMA_SERVER)"
        )
    if llama_cpp_gguf(args.model) is None:
        for name in ("llama.cpp", "llama-server"):
            why.setdefault(name, f"llama.cpp serves a .gguf file; model {args.model!r} is none")
    for name in [c for c in configs if c in why]:
        print(f"{name}: skipped: {why[name]}")
    return [c for c in configs if c not in why]


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
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"some of {','.join(CONFIGS)} (all)"
    )
    parser.add_argument(
        "--llama-server",
        default=os.environ.get("LLAMA_SERVER"),
        help="llama.cpp's llama-server binary (default: $LLAMA_SERVER)",
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"some of {','.join(WORKLOADS)} (all)"
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    low, high = (int(x) for x in args.tool_tokens.split(","))
    configs = pick("--configs", args.configs, CONFIGS)
    names = pick("--workloads", args.workloads, WORKLOADS)

    print("$ " + shlex.join(["python", "bench/agent_rollouts.py", *(argv or sys.argv[1:])]))
    configs = runnable(configs, args)
    loaded = load_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    model.generation_config.pad_token_id = tok.pad_token_id
    bf16 = copy.deepcopy(model).to(torch.bfloat16) if "reuse-bf16" in configs else None
    rollouts = build_workload(tok, args.groups, args.turns, (low, high), args.seed)
    load_before = os.getloadavg()[0]

    runs: list[tuple[str, list[Result]]] = []
    for workload, chosen in workloads(names, rollouts):
        results = []
        for name in configs:
            results.append(await run_config(name, loaded, bf16, chosen, args))
            print(f"  {workload} {name}: {results[-1].tokens_per_s:.1f} tok/s", flush=True)
        runs.append((workload, results))

    print(
        f"model {loaded.name}: {args.groups} groups x {G} rollouts x {args.turns} turns, "
        f"{args.max_tokens} new tokens per turn, temperature 1.0, tool results {low}-{high} "
        f"tokens; torch {torch.__version__} on {torch.get_num_threads()} CPU threads"
    )
    print(
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
        f"({os.cpu_count()} cores; other work on them lowers all sides unevenly)"
    )
    print("computes in: " + "; ".join(f"{c} {COMPUTES_IN[c]}" for c in configs))
    for workload, results in runs:
        lengths = results[0].prompt_lengths
        print(
            f"\n{workload}: {results[0].rollouts} rollouts at once, "
            f"prompts {min(lengths)}-{max(lengths)} tokens"
        )
        print("\n".join(table(results)))
        by_name = {r.name: r for r in results}
        if "generate" in by_name:
            print(f"generate also computed {by_name['generate'].padding} padding positions")
        if "reuse" in by_name and "no-reuse" in by_name:
            reuse, no_reuse = by_name["reuse"], by_name["no-reuse"]
            same = sum(reuse.replies[k] == no_reuse.replies[k] for k in reuse.replies)
            print(f"replies identical with and without reuse: {same}/{len(reuse.replies)}")
        for note in (n for r in results for n in r.notes):
            print(note)
        if len(results) > 1:
            print(ratios(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
