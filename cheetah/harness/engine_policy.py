"""`EnginePolicy`: a policy backed by an ``Engine`` (in process or remote), speaking token ids.

The prompt is built with the model's chat template by ``cheetah.model.chat``; assistant
messages that carry ``token_ids`` (earlier turns of this rollout) enter the prompt verbatim,
so turn k+1's prompt starts with exactly the ids the engine produced in turn k. The returned
``Generation`` carries the sampled ids, their behaviour logprobs, the prompt ids and the
policy version, which is everything the trainer needs; the text is only for the harness
(tool-call parsing) and the user.

``generate_streaming`` hands each token's text to a callback as the engine samples it, when
the engine streams (``LocalEngine.stream``; the joined pieces are the completion's text);
an engine that does not (remote, Ray) gives the whole text at the end.

Left out: retries (an engine error is a ``PolicyError``; the loop decides what to do) and
context trimming (a prompt past the context is a ``PolicyError`` naming the sizes).
"""

from __future__ import annotations

from typing import Any

from cheetah.harness.policy import ContextExhausted, Generation, PolicyError, TextCallback
from cheetah.harness.trajectory import Message
from cheetah.inference.protocol import (
    Completion,
    ContextTooLong,
    Engine,
    EngineError,
    InvalidRequest,
    SamplingParams,
)
from cheetah.model.chat import prompt_token_ids


class EnginePolicy:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        sampling: SamplingParams | None = None,
        name: str = "engine",
        owns_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = (sampling or SamplingParams()).validate()
        self.name = name
        self.owns_engine = owns_engine

    def close(self) -> None:
        """Stop the engine if this policy started it (its step thread must be joined before
        the interpreter exits, or the process aborts there); a shared engine is the
        caller's to close."""
        close = getattr(self.engine, "close", None)
        if self.owns_engine and close is not None:
            close()

    async def generate(self, messages: list[Message]) -> Generation:
        return await self._generate(messages, None)

    async def generate_streaming(
        self, messages: list[Message], on_text: TextCallback
    ) -> Generation:
        return await self._generate(messages, on_text)

    async def _generate(self, messages: list[Message], on_text: TextCallback | None) -> Generation:
        prompt = prompt_token_ids(messages, self.tokenizer)
        try:
            out = await self._complete(prompt, on_text)
        except ContextTooLong as e:
            raise ContextExhausted(f"{self.name}: {e}") from None
        except (EngineError, InvalidRequest) as e:
            raise PolicyError(f"{self.name}: {e}") from None
        return Generation(
            text=out.text,
            completion_tokens=len(out.token_ids),
            prompt_tokens=len(prompt),
            token_ids=list(out.token_ids),
            logprobs=list(out.logprobs),
            prompt_token_ids=prompt,
            policy_version=out.policy_version,
            finish_reason=out.finish_reason,
            max_new_tokens=self.sampling.max_tokens,
        )

    async def _complete(self, prompt: list[int], on_text: TextCallback | None) -> Completion:
        stream = getattr(self.engine, "stream", None)
        if on_text is None or stream is None:
            out = await self.engine.generate(prompt, self.sampling)
            if on_text is not None and out.text:
                on_text(out.text)
            return out
        async for item in stream(prompt, self.sampling):
            if isinstance(item, Completion):
                return item
            if item.text:
                on_text(item.text)
        raise EngineError("the engine ended a request without a result")
