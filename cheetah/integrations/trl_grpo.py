"""TRL's ``GRPOTrainer`` on cheetah's tasks: multi-turn episodes through ``tasks.gym.TaskEnv``.

TRL 1.16 lets a trainer bring its own rollouts (``GRPOTrainer(rollout_func=...)``); that is
the mechanism used here, because its ``environment_factory`` expects tool calls in TRL's own
format and a synchronous ``reset``. ``CheetahRollouts`` is the callback and the reward:

- the dataset is one row per task, its ``prompt`` the task id (TRL passes only prompts to
  the callback, each repeated ``num_generations`` times);
- each episode runs in a ``TaskEnv`` (the product's loop, tools, limits and grader; local or
  env-server sessions), the trainer's model generating every assistant turn with
  ``transformers.generate`` at the trainer's temperature;
- ``completion_ids`` are all assistant turns with the tool results' tokens between them, and
  ``env_mask`` marks the latter 0 so the loss covers only the model's tokens; the tool
  results are tokenized as the chat template renders them after the assistant's EOS (as TRL
  does for its own tools);
- the reward is the episode's (the hidden checks' grade), given to TRL as a rollout field.

Episodes of one call run concurrently on a private event loop (tool calls overlap; the
model generates one turn at a time). Deliberately left out: vLLM generation (TRL's
``use_vllm``; use cheetah's own trainer for batched engine rollouts), and logprobs from
generation (TRL recomputes them when ``use_vllm`` is off).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from cheetah.harness.loop import AgentLimits
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener


def task_dataset(tasks: list[Task]):
    """A ``datasets.Dataset`` with one row per task: ``prompt`` and ``task_id`` (its id)."""
    from datasets import Dataset

    ids = [t.id for t in tasks]
    return Dataset.from_dict({"prompt": ids, "task_id": ids})


class CheetahRollouts:
    """``rollout_func`` (the object) and ``reward`` (its method) for ``GRPOTrainer``."""

    def __init__(
        self,
        tasks: list[Task],
        make_sessions: Callable[[], TaskSessionOpener],
        tokenizer: Any,
        *,
        limits: AgentLimits | None = None,
        max_new_tokens: int = 256,
    ) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.tokenizer, self.max_new_tokens = tokenizer, max_new_tokens
        self.limits = limits or AgentLimits(max_turns=4)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.sessions = asyncio.run_coroutine_threadsafe(_call(make_sessions), self.loop).result()

    # -- TRL's rollout_func ----------------------------------------------------------
    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, list]:
        unknown = sorted(set(prompts) - set(self.tasks))
        if unknown:
            raise KeyError(f"prompts that are no task id: {unknown[:5]}")

        async def episodes() -> list[tuple[list, list, list, float]]:
            return await asyncio.gather(*(self._episode(trainer, p) for p in prompts))

        done = asyncio.run_coroutine_threadsafe(episodes(), self.loop).result()
        return {
            "prompt_ids": [d[0] for d in done],
            "completion_ids": [d[1] for d in done],
            "logprobs": None,
            "env_mask": [d[2] for d in done],
            "episode_reward": [d[3] for d in done],
        }

    # -- TRL's reward function ---------------------------------------------------------
    def reward(self, prompts=None, completions=None, episode_reward=None, **_: Any) -> list[float]:
        """The episodes' rewards, passed through (TRL hands rollout fields to rewards)."""
        return list(episode_reward or [])

    async def _episode(self, trainer: Any, task_id: str) -> tuple[list, list, list, float]:
        env = TaskEnv(self.sessions, self.limits)
        obs, _ = await env.reset(self.tasks[task_id])
        prompt = self._render(obs.messages, generation=True)
        ids: list[int] = []
        mask: list[int] = []
        try:
            while True:
                turn, cut = self._generate(trainer, prompt + ids)
                ids += turn
                # an EOS added to a turn cut at max_new_tokens was not sampled: not trained
                mask += [1] * (len(turn) - cut) + [0] * cut
                text = self.tokenizer.decode(turn, skip_special_tokens=True)
                obs, reward, terminated, truncated, _ = await env.step(
                    text, token_ids=turn, finish_reason="length" if cut else "stop"
                )
                if terminated or truncated:
                    return prompt, ids, mask, float(reward)
                between = self._results_ids(obs.new)
                ids += between
                mask += [0] * len(between)
        finally:
            await env.close()

    def _render(self, messages: list[dict], generation: bool) -> list[int]:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation, tokenize=True, return_dict=False
        )

    def _results_ids(self, new: list[dict]) -> list[int]:
        """The tokens the chat template puts between an assistant turn's EOS and the next
        turn's generation prompt, for the tool results ``new``."""
        before = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        prefix = self._render(before, generation=False)
        eos = self.tokenizer.eos_token_id
        ends = [i for i, t in enumerate(prefix) if t == eos]
        prefix = prefix[: ends[-1] + 1] if ends else prefix
        full = self._render(before + new, generation=True)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not extend a conversation by appending")
        return full[len(prefix) :]

    def _generate(self, trainer: Any, ids: list[int]) -> tuple[list[int], int]:
        """One sampled turn ending in EOS, and 1 if that EOS was added (the turn was cut)."""
        import torch
        from trl.models import unwrap_model_for_generation

        eos = self.tokenizer.eos_token_id
        with (
            unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model,
            torch.no_grad(),
        ):
            x = torch.tensor([ids], device=trainer.accelerator.device)
            out = model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=self.max_new_tokens,
                do_sample=True,
                temperature=trainer.args.temperature,
                pad_token_id=self.tokenizer.pad_token_id or eos,
            )
        new = out[0, len(ids) :].tolist()
        return (new[: new.index(eos) + 1], 0) if eos in new else ([*new, eos], 1)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


async def _call(make):
    return make()
