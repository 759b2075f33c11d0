"""Turn a ``--model`` string into a policy: ``scripted:FILE`` or an OpenAI-compatible URL."""

from __future__ import annotations

from cheetah.harness.openai_policy import OpenAIPolicy
from cheetah.harness.policy import Policy, PolicyError, ScriptedPolicy

MODEL_HELP = (
    "scripted:FILE (replay a JSON list of assistant messages) or the base URL of an "
    "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1"
)


def policy_from_spec(
    spec: str, *, model_name: str | None = None, temperature: float = 0.0, max_tokens: int = 2048
) -> Policy:
    if spec.startswith("scripted:"):
        return ScriptedPolicy.from_file(spec.removeprefix("scripted:"))
    if spec.startswith(("http://", "https://")):
        return OpenAIPolicy(spec, model_name, temperature=temperature, max_tokens=max_tokens)
    raise PolicyError(f"unknown model {spec!r}; expected {MODEL_HELP}")
