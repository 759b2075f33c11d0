"""``LocalEngine``: continuous batching over a Hugging Face causal LM's KV cache, in process.

One background thread runs the step loop (schedule -> execute -> update, as in vLLM):

1. apply a pending ``load_weights`` (between steps, never inside one);
2. admit waiting requests, first come first served, up to ``max_batch`` rows and while the
   batch's KV at its largest stays within ``max_batch_tokens`` (memory is bounded by
   design, not by luck): look each prompt up in the prefix cache,
   prefill what is not cached (in left-padded groups of similar length), sample each one's
   first token, merge their KV cache into the running batch's, and store their prompts' KV;
3. one decode step for every running request: feed each its last sampled token, sample the
   next;
4. finish requests (end-of-turn token, stop id or string, ``max_tokens``, context end), store
   the KV of prompt + reply in the prefix cache, drop their rows from the batch, and trim
   leading columns that are padding for every row.

Requests that arrive while a step runs join at the next one. Why a hand-written batch over
the model's forward with a ``DynamicCache`` (``batch.KVBatch``) rather than ``model.generate``:
``generate`` runs a fixed batch to the end, so a short request waits for the longest one and a
new request waits for the whole batch; here rows enter and leave every step. Why left padding
in one shared cache rather than paged blocks: it reuses the model's own forward unchanged and
costs one copy of the batch's KV per admission (``KVBatch`` rebuilds its buffers); the price
is that a long prompt pads every running row to its length until it finishes. Paged attention (vLLM, SGLang) avoids that and is what a GPU
deployment should use, through ``RemoteEngine``.

Prefix reuse (``prefix_cache.py`` says how blocks are stored and evicted): every agent prompt
starts with the same ~1,100-token system prompt, group members share their query, and turn
N+1 extends turn N's prompt and reply; without reuse each of them pays a full prefill. A
request whose prompt starts with cached
blocks prefills only the rest, from position ``hit length`` on, after the cached KV
(``KVBatch.prefill`` with prefixes). At least the last prompt token is always run: its logits
give the first sample. Requests admitted in the same step that share a block not cached yet
would all miss; so one of them (a leader) is prefilled first and stored, and the others are
looked up again after it, within the same step. Outputs stay exact: the cached keys and
values are those the model computed for the same tokens at the same positions, so only
float rounding differs (``bench/engine.py`` compares logprobs and greedy tokens with the
engine without the cache). ``load_weights`` clears the cache, and a request that was running
across a weight change is not stored. ``prefix_cache_tokens=0`` turns all of this off;
models with sliding-window layers run without it. ``stats()`` reports tokens reused.

Text, for streamed requests and stop strings, is built a token at a time
(``request.py``, ``detokenize.py``): each step decodes a window of a few tokens, and stop strings are searched
for only in the text held back plus the new piece, so a request's text costs time linear in
its length. Requests that need neither are decoded once, at the end.

Logprobs: ``logprobs[i]`` is the sampled token's log-probability under the distribution it
was actually drawn from (logits / temperature, top-k, top-p, renormalized); greedy requests
report the plain log-softmax. ``sampling.py`` says why.

The asyncio API (``generate``, ``stream``, ``load_weights``) can be called from any event
loop; results come back through ``loop.call_soon_threadsafe``. Torch releases the GIL in its
kernels, so the caller's event loop (an HTTP server, the rollout workers) stays responsive.

The model runs where the caller put it (inputs follow its device; sampling runs on CPU);
only CPU is exercised here. Left out: paged KV memory (cached prefixes are copied into the
batch, not shared), speculative decoding, chunked prefill, CUDA graphs. Longer than most
modules because the engine thread's loop (admission, prefill with cached prefixes, decode,
weight loads between steps) shares one state; the pieces that stand alone live beside it
(batch, request, sampling, prefix_cache, detokenize).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import torch

from cheetah.inference.batch import KVBatch
from cheetah.inference.detokenize import IncrementalDetokenizer
from cheetah.inference.prefix_cache import BLOCK, PrefixCache, PrefixHit
from cheetah.inference.protocol import (
    Completion,
    ContextTooLong,
    EngineError,
    FinishReason,
    InvalidRequest,
    SamplingParams,
)
from cheetah.inference.request import EngineRequest, EngineStats, TokenEvent
from cheetah.inference.sampling import sample
from cheetah.memory import release_memory
from cheetah.model.loading import LoadedModel, check_state_dict

# a request joins a prefill group unless the padding it adds costs more than a forward of its
# own, taken as this many prompt tokens. On 2 idle CPU cores with SmolLM2-135M a batch-1
# forward takes ~40 ms and prefill ~1.8 ms per token, about 24 tokens; 64 leans toward fewer,
# larger forwards, which a GPU (where a forward's fixed cost is larger) prefers too.
FORWARD_COST_TOKENS = 64
TRIM_EVERY_S = 2.0  # heap trims (``_trim_memory``) at most this often


class LocalEngine:
    """Serves many concurrent requests from one model with continuous batching (see module).

    The engine owns the model it is given: ``load_weights`` copies into its parameters.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch: int = 32,
        max_context: int | None = None,
        version: int = 0,
        prefix_cache_tokens: int = 32768,
        max_batch_tokens: int = 65536,
    ) -> None:
        """``prefix_cache_tokens`` bounds the prefix cache (0 disables it); its KV takes
        45 KiB per token for SmolLM2-135M in fp32, so the default is about 1.4 GiB.
        ``max_batch_tokens`` bounds the running batch's KV (rows x columns, see
        ``_fits``): 2.8 GiB for that model by default."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        # the engine thread decodes with its own copy: a Rust tokenizer used from two threads
        # at once (the server encodes while we decode) can fail with "Already borrowed"
        self._detokenizer = copy.deepcopy(tokenizer)
        self.max_batch = max_batch
        self.max_batch_tokens = max_batch_tokens
        self.max_context = max_context or int(
            getattr(model.config, "max_position_embeddings", 2048)
        )
        self.vocab_size = int(model.config.vocab_size)
        self._version = version
        self._eos = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self._batch: KVBatch[EngineRequest] = KVBatch(
            model, int(pad if pad is not None else next(iter(self._eos)))
        )
        self._cond = threading.Condition()
        self._waiting: deque[EngineRequest] = deque()
        self._weights: list[tuple[dict[str, torch.Tensor], int, asyncio.Future[None]]] = []
        self._prefix = PrefixCache(prefix_cache_tokens if self._batch.reusable else 0)
        self._weights_generation = 0  # bumped by every load: KV computed before it is stale
        self._prompt_tokens = self._prompt_tokens_reused = 0
        self._seeds = itertools.count(int(torch.initial_seed()) % 2**31)
        self._closed = False
        self._thread: threading.Thread | None = None
        self.steps = 0
        self._trimmed_at, self._rows_after_trim = 0.0, 0

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, **kwargs: Any) -> LocalEngine:
        return cls(loaded.model, loaded.tokenizer, **kwargs)

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def batch_size(self) -> int:
        """Rows in the running batch (for tests and metrics)."""
        return len(self._batch)

    def stats(self) -> EngineStats:
        return EngineStats(
            steps=self.steps,
            prompt_tokens=self._prompt_tokens,
            prompt_tokens_reused=self._prompt_tokens_reused,
            prefix_cache_tokens=self._prefix.tokens,
            prefix_cache_capacity=self._prefix.capacity_tokens,
            prefix_cache_evicted=self._prefix.evicted_tokens,
        )

    # -- asyncio API ---------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        async for item in self.stream(prompt_ids, sampling, with_text=bool(sampling.stop)):
            if isinstance(item, Completion):
                return item
        raise EngineError("the engine ended a request without a result")

    async def stream(
        self, prompt_ids: list[int], sampling: SamplingParams, *, with_text: bool = True
    ) -> AsyncIterator[TokenEvent | Completion]:
        """Yield a ``TokenEvent`` per sampled token, then the ``Completion``.

        ``with_text=False`` skips detokenizing every step (``TokenEvent.text`` stays empty).
        """
        request = self._submit(prompt_ids, sampling, want_text=with_text)
        done = False
        try:
            while True:
                item = await request.events.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Completion):
                    done = True
                yield item
                if done:
                    return
        finally:
            if not done:
                request.leaving = True  # cancelled: the loop drops the row at its next step

    async def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy new weights in between two steps; running requests continue with them."""
        await asyncio.to_thread(check_state_dict, self.model, state_dict)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._cond:
            self._ensure_thread()
            self._weights.append((state_dict, version, future))
            self._cond.notify()
        await future

    def close(self) -> None:
        """Stop the step loop; waiting and running requests get ``EngineError``."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- submission ----------------------------------------------------------------------

    def _submit(
        self, prompt_ids: list[int], sampling: SamplingParams, want_text: bool
    ) -> EngineRequest:
        sampling.validate()
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise InvalidRequest("the prompt is empty")
        if len(prompt) >= self.max_context:
            raise ContextTooLong(
                f"the prompt has {len(prompt)} tokens; this model's context is "
                f"{self.max_context} tokens, leaving no room to generate"
            )
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise InvalidRequest(f"prompt token ids must be in [0, {self.vocab_size})")
        generator = torch.Generator()
        generator.manual_seed(sampling.seed if sampling.seed is not None else next(self._seeds))
        request = EngineRequest(
            prompt_ids=prompt,
            sampling=sampling,
            loop=asyncio.get_running_loop(),
            events=asyncio.Queue(),
            generator=generator,
            want_text=want_text,
        )
        if want_text or sampling.stop:
            request.detokenizer = IncrementalDetokenizer(self._detokenizer)
        with self._cond:
            if self._closed:
                raise EngineError("the engine is closed")
            self._ensure_thread()
            self._waiting.append(request)
            self._cond.notify()
        return request

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="cheetah-engine", daemon=True)
            self._thread.start()

    # -- step loop (engine thread) -------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._waiting or self._batch or self._weights):
                    self._cond.wait()
                if self._closed:
                    break
                weights, self._weights = self._weights, []
                free = self.max_batch - len(self._batch)
                admitted = []
                while self._waiting and len(admitted) < free:
                    request = self._waiting[0]
                    if not request.leaving and not self._fits([*admitted, request]):
                        break  # it waits for rows to finish (first come, first served)
                    self._waiting.popleft()
                    if not request.leaving:
                        admitted.append(request)
            for state, version, future in weights:
                self._apply_weights(state, version, future)
            try:
                with torch.inference_mode():
                    if admitted:
                        self._prefill(admitted)
                    self._drop_finished()
                    if self._batch:
                        self._decode()
                    self._drop_finished()
                self.steps += 1
                self._trim_memory(admitted)
            except Exception as e:  # a bug or OOM: fail these requests, keep serving others
                error = EngineError(f"engine step failed: {type(e).__name__}: {e}")
                for request in self._batch.rows + [
                    r for r in admitted if r not in self._batch.rows
                ]:
                    request.send(error)
                self._batch.clear()
        error = EngineError("the engine was closed")
        for request in list(self._waiting) + self._batch.rows:
            request.send(error)
        for _, _, future in self._weights:
            future.get_loop().call_soon_threadsafe(_set_exception, future, error)

    def _trim_memory(self, admitted: list[EngineRequest]) -> None:
        """After steps that reshaped the batch (rows in or out: fresh KV buffers, prefill
        activations), give freed heap pages back to the OS (``cheetah/memory.py``), at most
        every ``TRIM_EVERY_S`` and always when the batch empties (the engine may idle next):
        glibc keeps them otherwise, and the engine's process holds the memory of its widest
        batch for the rest of the run."""
        reshaped = bool(admitted) or len(self._batch) != self._rows_after_trim
        due = not self._batch or time.monotonic() - self._trimmed_at >= TRIM_EVERY_S
        if reshaped and due:
            release_memory()
            self._trimmed_at, self._rows_after_trim = time.monotonic(), len(self._batch)

    def _fits(self, admitted: list[EngineRequest]) -> bool:
        """Whether the running rows plus ``admitted`` stay within ``max_batch_tokens`` until
        they all end: the batch is as wide as its longest row (``KVBatch`` compacts rows), and
        no row grows past prompt + ``max_tokens`` (or the context). A request alone in an
        empty batch always fits, so an oversized one runs by itself rather than never."""
        rows = self._batch.rows + admitted
        if len(rows) == 1:
            return True
        ends = (len(r.prompt_ids) + r.sampling.max_tokens for r in rows)
        return len(rows) * min(max(ends), self.max_context) <= self.max_batch_tokens

    def _apply_weights(
        self, state: dict[str, torch.Tensor], version: int, future: asyncio.Future[None]
    ) -> None:
        self._prefix.clear()  # before loading: a load that fails halfway changes weights too
        self._weights_generation += 1
        try:
            with torch.no_grad():
                self.model.load_state_dict(state, strict=False)
            self._version = version
        except Exception as e:
            future.get_loop().call_soon_threadsafe(_set_exception, future, e)
            return
        future.get_loop().call_soon_threadsafe(_set_result, future)

    def _prefill(self, requests: list[EngineRequest]) -> None:
        pending = requests
        while pending:  # more than one round only when admitted prompts share uncached blocks
            leaders: list[tuple[EngineRequest, PrefixHit]] = []
            followers: list[EngineRequest] = []
            shared: set[tuple[object, tuple[int, ...]]] = set()
            for r in pending:
                # the last token is always run: its logits give the first sample
                hit = self._prefix.match(r.prompt_ids, len(r.prompt_ids) - 1)
                after = tuple(r.prompt_ids[hit.length : hit.length + BLOCK])
                end = hit.length + BLOCK  # where the next block ends; can a leader store it?
                could_share = end < len(r.prompt_ids) and end <= self._prefix.capacity_tokens
                if could_share and (hit.last, after) in shared:
                    followers.append(r)  # a leader stores this block; look up again after it
                    continue
                shared.add((hit.last, after))
                leaders.append((r, hit))
            for group in _prefill_groups(leaders):
                self._prefill_group(group)
            pending = followers

    def _prefill_group(self, group: list[tuple[EngineRequest, PrefixHit]]) -> None:
        requests = [r for r, _ in group]
        logits = self._batch.prefill(
            requests,
            [r.prompt_ids[hit.length :] for r, hit in group],
            [hit.kv() for _, hit in group],
        )
        first_row = len(self._batch) - len(group)
        for i, (r, hit) in enumerate(group):
            r.weights = self._weights_generation
            self._prompt_tokens += len(r.prompt_ids)
            self._prompt_tokens_reused += hit.length
            self._remember(first_row + i, r.prompt_ids)
        self._sample_and_update(requests, logits)

    def _remember(self, row: int, tokens: list[int]) -> None:
        """Store the KV of ``tokens``, the first tokens of the batch's ``row``, for reuse."""
        if self._prefix.enabled:
            self._prefix.insert(tokens, lambda start, end: self._batch.row_kv(row, start, end))

    def _decode(self) -> None:
        logits = self._batch.decode([r.ids[-1] for r in self._batch.rows])
        self._sample_and_update(self._batch.rows, logits)

    def _drop_finished(self) -> None:
        keep = []
        for i, r in enumerate(self._batch.rows):
            if not r.leaving:
                keep.append(i)
            elif r.weights == self._weights_generation:
                # the KV holds prompt + ids[:-1]: the last sampled token was never fed back
                self._remember(i, r.prompt_ids + r.ids[:-1])
        self._batch.keep(keep)

    # -- sampling and bookkeeping --------------------------------------------------------

    def _sample_and_update(self, requests: list[EngineRequest], logits: torch.Tensor) -> None:
        ids, logprobs, tops = sample(
            logits.float().cpu(), [r.sampling for r in requests], [r.generator for r in requests]
        )
        for row, r in enumerate(requests):
            if r.leaving:
                continue
            token, logprob = ids[row], logprobs[row]
            if r.first_version is None:
                r.first_version = self._version
            r.ids.append(token)
            r.logprobs.append(logprob)
            r.top.append(tops[row])
            reason = self._finish_reason(r)
            delta = ""
            if r.detokenizer is not None:
                delta, stopped = r.advance_text(final=reason is not None)
                reason = "stop" if stopped else reason
            text = delta if r.want_text else ""
            r.send(TokenEvent(token, logprob, text, self._version, tops[row]))
            if reason is not None:
                r.send(self._completion(r, reason))
                r.leaving = True

    def _finish_reason(self, r: EngineRequest) -> FinishReason | None:
        s = r.sampling
        token = r.ids[-1]
        if not s.ignore_eos and (token in self._eos or token in s.stop_token_ids):
            return "stop"
        if len(r.ids) >= s.max_tokens or len(r.prompt_ids) + len(r.ids) >= self.max_context:
            return "length"
        return None  # a stop string is found by ``EngineRequest.advance_text``

    def _completion(self, r: EngineRequest, reason: FinishReason) -> Completion:
        if r.detokenizer is not None:
            text = "".join(r.text_parts)
        else:  # neither streamed nor stop strings: one decode at the end
            text = self._detokenizer.decode(r.ids, skip_special_tokens=True)
        return Completion(
            token_ids=list(r.ids),
            logprobs=list(r.logprobs),
            prompt_token_ids=list(r.prompt_ids),
            policy_version=r.first_version if r.first_version is not None else self._version,
            last_policy_version=self._version,
            finish_reason=reason,
            text=text,
            top_logprobs=list(r.top) if r.sampling.top_logprobs else [],
        )


def _prefill_groups(
    items: list[tuple[EngineRequest, PrefixHit]],
) -> list[list[tuple[EngineRequest, PrefixHit]]]:
    """Split into prefill groups by uncached length: left padding to the longest is compute
    spent on nothing, so a request starts a new group when the padding it would add to the
    group's rows costs more than a forward of its own."""

    def todo(item: tuple[EngineRequest, PrefixHit]) -> int:
        return len(item[0].prompt_ids) - item[1].length

    groups: list[list[tuple[EngineRequest, PrefixHit]]] = []
    longest = 0
    for item in sorted(items, key=todo):
        if groups and len(groups[-1]) * (todo(item) - longest) <= FORWARD_COST_TOKENS:
            groups[-1].append(item)
        else:
            groups.append([item])
        longest = todo(item)
    return groups


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the tokenizer and model config name no end-of-sequence token")
    return ids


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _set_exception(future: asyncio.Future[None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
