"""``RemoteEngine``: the ``Engine`` protocol over an OpenAI-compatible HTTP server.

It sends token-id prompts to ``POST /v1/completions`` (the OpenAI API accepts a list of ids
as ``prompt``) with ``return_token_ids`` and ``logprobs: 0``, and reads back the sampled ids
(``choices[0].token_ids``) and their logprobs (``logprobs.token_logprobs``). Weight updates
ask the server to reload a checkpoint directory; ``load_weights(state_dict)`` first writes the
tensors as safetensors under ``staging_dir`` (which the server must be able to read).

After one successful sync, ``load_weights`` sends a lossless delta instead
(``cheetah.inference.weight_delta``: XOR against the last state synced to this server, then
compressed) to ``delta_route`` when ``GET /health`` reports that the server still holds that
state's version. The first sync, a server at another version, and a refused delta (409 on a
mismatch, 413 too large, 404 on servers without the route) take the checkpoint path;
``last_sync`` says which path the last load took and why. The price: a host copy of the last
synced weights per server. A server that holds the weights in another dtype than the trainer
sends refuses every delta (409), so each sync there pays for an encoding before its checkpoint;
give such servers ``delta_route=None``.

Every request, the weight routes included, carries ``Authorization: Bearer TOKEN`` where
``TOKEN`` is ``api_key``, else ``$CHEETAH_API_TOKEN``, else ``$OPENAI_API_KEY``
(``protocol.api_token``): ``cheetah serve --token-file`` wants it on every route but
``/health``, and refuses the weight routes (403) when it was started without one.

Servers that plug in (``kind``; ``model.engine_kind`` in a run config):

- ``cheetah``: ``cheetah serve --model default --port 8000``; weights via ``POST /v1/weights``
  ``{"path": dir}`` (the default ``weights_route``/``weights_field``), deltas as above.
- ``vllm``: ``VLLM_SERVER_DEV_MODE=1 vllm serve <model dir> --port 8000 --logprobs-mode
  processed_logprobs`` (its logprobs, like cheetah's, then come from the temperature-scaled
  distribution actually sampled from; the default is the raw model's). A checkpoint reloads
  in place through its development routes: ``POST /pause?mode=wait``, ``POST
  /collective_rpc`` ``{"method": "reload_weights", "kwargs": {"weights_path": dir}}``, ``POST
  /reset_prefix_cache`` (KV of the old weights must not serve the new ones), ``POST
  /resume``; they exist only with ``VLLM_SERVER_DEV_MODE=1``. Read from vLLM 0.33's source
  (``entrypoints/serve/dev/rpc``, ``entrypoints/rl/online``); older releases name them
  differently.
- ``sglang``: ``python -m sglang.launch_server --model-path <model dir> --port 30000``;
  ``POST /update_weights_from_disk`` ``{"model_path": dir, "flush_cache": true,
  "weight_version": "<version>"}``, which answers ``{"success": false, "message": ...}`` on
  a failed load (an ``EngineError`` here). Its logprobs are log_softmax(logits / T), the
  distribution cheetah trains on. Read from SGLang 0.5.23's source (``io_struct.py``).

Both answer ``/v1/completions`` with ``return_token_ids`` (ids in ``choices[0].token_ids``);
responses without ids are an ``EngineError`` here rather than a silent re-tokenization.
``bench/gpu_remote_engines.sh`` starts each on the default model and runs a training step
against it (a GPU machine; the result or its absence is in BENCHMARKS.md).

Left out: ``top_logprobs`` (servers name alternatives by text, not id), retries and load
balancing across servers (the rollout scheduler owns those), streaming (a rollout needs the
whole turn), NCCL weight broadcast, a first sync without a shared staging directory, and
sharing one encoded delta (or one host copy) between servers that hold the same version.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from cheetah.inference.protocol import (
    Completion,
    ContextTooLong,
    EngineError,
    InvalidRequest,
    SamplingParams,
    api_token,
    is_context_message,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class WeightSync:
    """How one ``load_weights`` reached the server."""

    mode: Literal["delta", "full"]
    version: int
    delta_bytes: int = 0  # the blob's size, when mode is "delta"
    fallback: str | None = None  # why a checkpoint went instead of a delta


ServerKind = Literal["cheetah", "vllm", "sglang"]
SERVER_KINDS: tuple[ServerKind, ...] = ("cheetah", "vllm", "sglang")


class RemoteEngine:
    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        kind: ServerKind = "cheetah",
        api_key: str | None = None,
        timeout_s: float = 600.0,
        weights_route: str = "/v1/weights",
        weights_field: str = "path",
        staging_dir: str | Path | None = None,
        delta_route: str | None = "/v1/weights/delta",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``kind``: which server's weight-update calls to use (module docstring);
        ``api_key``: the bearer token sent on every request (default: ``api_token()``);
        ``delta_route``: where ``load_weights`` posts weight deltas (None: checkpoints only;
        always None for vLLM and SGLang, which take no deltas)."""
        if kind not in SERVER_KINDS:
            raise ValueError(f"unknown server kind {kind!r} (one of {', '.join(SERVER_KINDS)})")
        self.kind = kind
        if kind != "cheetah":
            delta_route = None
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.weights_route = weights_route
        self.weights_field = weights_field
        self.staging_dir = Path(staging_dir) if staging_dir else None
        self.delta_route = delta_route
        self.last_sync: WeightSync | None = None
        self._synced: tuple[int, dict[str, torch.Tensor]] | None = None  # version, host copy
        key = api_token(api_key)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_s, headers=headers, transport=transport
        )
        self._version = 0

    @property
    def policy_version(self) -> int:
        """The latest version the server reported (or that we asked it to load)."""
        return self._version

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        sampling.validate()
        body: dict[str, Any] = {
            "model": await self._model_name(),
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # the sampled token's logprob only; alternatives stay server-side
            "return_token_ids": True,
            "ignore_eos": sampling.ignore_eos,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.stop_token_ids:
            body["stop_token_ids"] = list(sampling.stop_token_ids)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        data = await self._post("/v1/completions", body)
        return self._parse(data, prompt_ids, sampling)

    async def load_checkpoint(self, path: str | Path, version: int) -> None:
        """Ask the server to load the checkpoint directory at ``path`` as ``version``."""
        path = str(path)
        if self.kind == "vllm":
            try:
                await self._request("POST", "/pause?mode=wait", None, want_json=False)
            except InvalidRequest as e:
                raise EngineError(
                    f"{e}; vLLM serves its weight-reload routes only when started with "
                    "VLLM_SERVER_DEV_MODE=1"
                ) from None
            try:
                body = {"method": "reload_weights", "kwargs": {"weights_path": path}}
                await self._request("POST", "/collective_rpc", body, want_json=False)
                await self._request("POST", "/reset_prefix_cache", None, want_json=False)
            finally:
                await self._request("POST", "/resume", None, want_json=False)
        elif self.kind == "sglang":
            body = {"model_path": path, "flush_cache": True, "weight_version": str(version)}
            answer = await self._post("/update_weights_from_disk", body)
            if not answer.get("success", False):
                raise EngineError(f"{self.base_url} did not load {path}: {answer.get('message')}")
        else:
            await self._post(self.weights_route, {self.weights_field: path, "version": version})
        self._version = version

    async def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Have the server load ``state_dict`` as ``version``: as a delta against the state
        last synced to it when it still holds that version, else as a checkpoint written under
        ``staging_dir/v{version}`` (see the module docstring)."""
        fallback = await self._load_delta(state_dict, version)
        if fallback is not None:
            await self._load_staged(state_dict, version)
            self.last_sync = WeightSync("full", version, fallback=fallback)
        self._synced = (version, await asyncio.to_thread(_host_copy, state_dict))

    async def _load_delta(self, state_dict: dict[str, torch.Tensor], version: int) -> str | None:
        """None once the server has loaded the delta, else why no delta went."""
        if self.delta_route is None:
            return "delta_route is None"
        if self._synced is None:
            return "first sync to this server"
        base_version, base = self._synced
        held = await self._held_version()
        if held != base_version:
            return f"the server holds version {held}, the last synced state is {base_version}"
        from cheetah.inference.weight_delta import encode_delta

        blob = await asyncio.to_thread(encode_delta, base, state_dict, base_version, version)
        try:
            await self._request("POST", self.delta_route, None, content=blob)
        except InvalidRequest as e:
            return f"the server refused the delta: {e}"
        self._version = version
        self.last_sync = WeightSync("delta", version, delta_bytes=len(blob))
        return None

    async def _held_version(self) -> int | None:
        """The policy version ``GET /health`` reports (None from servers that report none)."""
        try:
            data = await self._request("GET", "/health", None)
            return int(data["policy_version"])
        except (EngineError, InvalidRequest, KeyError, TypeError, ValueError):
            return None

    async def _load_staged(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        if self.staging_dir is None:
            raise EngineError(
                "RemoteEngine.load_weights needs staging_dir (a path the server reads)"
            )
        from safetensors.torch import save_file

        target = self.staging_dir / f"v{version}"
        target.mkdir(parents=True, exist_ok=True)
        tensors, seen = {}, set()
        for name, tensor in state_dict.items():
            t = tensor.detach().contiguous().cpu()
            # safetensors refuses shared storage (tied embeddings): give repeats their own copy
            tensors[name] = t.clone() if t.data_ptr() in seen else t
            seen.add(t.data_ptr())
        await asyncio.to_thread(save_file, tensors, str(target / "model.safetensors"))
        await self.load_checkpoint(target, version)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _model_name(self) -> str:
        if self.model is None:
            data = await self._request("GET", "/v1/models", None)
            try:
                self.model = str(data["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise EngineError(f"{self.base_url}/v1/models lists no model") from None
        return self.model

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body)

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        content: bytes | None = None,
        want_json: bool = True,
    ) -> Any:
        """JSON ``body``, or raw ``content`` (sent as application/octet-stream); the answer's
        JSON (``want_json=False``: routes that may answer with an empty body)."""
        headers = {"Content-Type": "application/octet-stream"} if content is not None else None
        try:
            resp = await self._client.request(
                method, path, json=body, content=content, headers=headers
            )
        except httpx.HTTPError as e:
            raise EngineError(
                f"cannot reach {self.base_url}{path}: {type(e).__name__}: {e}"
            ) from None
        if 400 <= resp.status_code < 500:
            message = f"{self.base_url}{path} answered {resp.status_code}: {_message(resp)}"
            if _error_type(resp) == "context_length_exceeded" or is_context_message(message):
                raise ContextTooLong(message)
            raise InvalidRequest(message)
        if resp.status_code != 200:
            raise EngineError(
                f"{self.base_url}{path} answered {resp.status_code}: {_message(resp)}"
            )
        if not want_json:
            return None
        try:
            return resp.json()
        except ValueError:
            raise EngineError(f"{self.base_url}{path} answered with something not JSON") from None

    def _parse(self, data: Any, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        try:
            choice = data["choices"][0]
            token_ids = [int(t) for t in choice["token_ids"]]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        except (KeyError, IndexError, TypeError, ValueError):
            raise EngineError(
                "the server's completion lacks choices[0].token_ids or logprobs.token_logprobs; "
                "it must return the sampled ids (vLLM: return_token_ids)"
            ) from None
        if len(logprobs) != len(token_ids):
            raise EngineError(f"{len(token_ids)} token ids but {len(logprobs)} logprobs")
        version = data.get("policy_version", choice.get("policy_version", self._version))
        self._version = max(self._version, int(version))
        finish = choice.get("finish_reason") or "stop"
        return Completion(
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_token_ids=[int(t) for t in choice.get("prompt_token_ids") or prompt_ids],
            policy_version=int(version),
            finish_reason=finish if finish in ("stop", "length", "abort") else "stop",
            text=choice.get("text") or "",
            last_policy_version=int(version),
        )


def _host_copy(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A CPU copy the caller cannot change under us (an optimizer steps its tensors in place)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in state_dict.items()}


def _error_type(resp: httpx.Response) -> str | None:
    try:
        error = resp.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("type") if isinstance(error, dict) else None


def _message(resp: httpx.Response) -> str:
    try:
        error = resp.json().get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    except (ValueError, AttributeError):
        pass
    return resp.text[:500]
