"""Turn a ``--model`` string into a policy: ``scripted:FILE`` or an OpenAI-compatible URL."""

from __future__ import annotations

from pathlib import Path

from cheetah.harness.openai_policy import OpenAIPolicy
from cheetah.harness.policy import Policy, PolicyError, ScriptedPolicy

MODEL_HELP = (
    "scripted:FILE (replay a JSON list of assistant messages), the base URL of an "
    "OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1), llama.cpp:FILE.gguf (llama.cpp "
    "started for this run, e.g. on `cheetah export --gguf` output), or a model run in process: "
    "default (SmolLM2-135M-Instruct), tiny (random, for tests) or a HF model directory"
)


def policy_from_spec(
    spec: str,
    *,
    model_name: str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 2048,
    token_file: str | Path | None = None,
) -> Policy:
    """The policy ``spec`` names; ``token_file`` holds the bearer token an OpenAI-compatible
    server wants (without one, ``OpenAIPolicy`` takes ``$CHEETAH_API_TOKEN``, then
    ``$OPENAI_API_KEY``; other policies need none). ``PolicyError`` says what is wrong."""
    if spec.startswith("scripted:"):
        return ScriptedPolicy.from_file(spec.removeprefix("scripted:"))
    if spec.startswith(("http://", "https://")):
        return OpenAIPolicy(
            spec,
            model_name,
            temperature=temperature,
            max_tokens=max_tokens,
            api_key=_token(token_file),
        )
    if spec.startswith("llama.cpp:"):
        return _llama_cpp_policy(spec.removeprefix("llama.cpp:"), temperature, max_tokens)
    if spec in ("default", "tiny") or Path(spec).expanduser().exists():
        return _local_engine_policy(spec, temperature, max_tokens)
    raise PolicyError(f"unknown model {spec!r}; expected {MODEL_HELP}")


def _token(token_file: str | Path | None) -> str | None:
    from cheetah.core.http_gate import SettingError, read_token

    if token_file is None:
        return None
    try:
        return read_token(token_file)
    except SettingError as e:
        raise PolicyError(f"--token-file: {e}") from None


def _local_engine_policy(spec: str, temperature: float, max_tokens: int) -> Policy:
    from cheetah.harness.engine_policy import EnginePolicy
    from cheetah.inference.local import LocalEngine
    from cheetah.inference.protocol import SamplingParams
    from cheetah.model.loading import ModelLoadError, build_tiny, load_model

    try:
        loaded = build_tiny() if spec == "tiny" else load_model(spec)
    except ModelLoadError as e:
        raise PolicyError(str(e)) from None
    engine = LocalEngine.from_loaded(loaded)
    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    return EnginePolicy(
        engine, loaded.tokenizer, sampling, name=f"engine:{loaded.name}", owns_engine=True
    )


class _LlamaCppPolicy(OpenAIPolicy):
    """``OpenAIPolicy`` to a llama.cpp server it started; ``close`` stops the server."""

    def __init__(self, server, **kw) -> None:
        super().__init__(server.url, server.name, api_key=server.api_key, **kw)
        self.server = server
        self.name = f"llama.cpp:{server.name}"

    def close(self) -> None:
        self.server.stop()


def _llama_cpp_policy(path: str, temperature: float, max_tokens: int) -> Policy:
    from cheetah.inference.llama_cpp_server import LlamaCppError, LlamaCppServer

    try:
        server = LlamaCppServer(Path(path), parallel=1).start()
    except LlamaCppError as e:
        raise PolicyError(str(e)) from None
    return _LlamaCppPolicy(server, temperature=temperature, max_tokens=max_tokens)


def close_policy(policy: object) -> None:
    """Release what ``policy_from_spec`` started for ``policy`` (a local engine's thread)."""
    close = getattr(policy, "close", None)
    if callable(close):
        close()
