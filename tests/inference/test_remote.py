"""RemoteEngine against a live cheetah server: same ids as in process, weights by checkpoint."""

from __future__ import annotations

import httpx
import pytest

from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import (
    ContextTooLong,
    Engine,
    EngineError,
    InvalidRequest,
    SamplingParams,
)
from cheetah.inference.remote import RemoteEngine
from cheetah.model.loading import build_tiny
from tests.inference.conftest import TOKEN

GREEDY = SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True)


@pytest.fixture
async def remote(server_url, tmp_path):
    eng = RemoteEngine(server_url, staging_dir=tmp_path / "staging", api_key=TOKEN)
    yield eng
    await eng.aclose()


async def test_remote_generation_matches_the_in_process_engine(remote, tiny):
    assert isinstance(remote, Engine)
    local = LocalEngine.from_loaded(tiny)
    try:
        prompt = [1, 9690, 198, 2683, 359, 253]
        expected = await local.generate(prompt, GREEDY)
        got = await remote.generate(prompt, GREEDY)
    finally:
        local.close()
    assert got.token_ids == expected.token_ids
    assert got.logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    assert got.prompt_token_ids == prompt
    assert got.text == expected.text and got.finish_reason == "length"
    assert remote.model == "tiny"


async def test_remote_stop_strings_and_seeds_pass_through(remote):
    prompt = [1, 9690, 198]
    full = await remote.generate(prompt, SamplingParams(temperature=0, max_tokens=10))
    stop = full.text.strip().split()[1] if len(full.text.split()) > 1 else full.text[-3:]
    cut = await remote.generate(prompt, SamplingParams(temperature=0, max_tokens=10, stop=(stop,)))
    assert cut.finish_reason == "stop" and stop not in cut.text
    seeded = SamplingParams(temperature=1.0, max_tokens=6, seed=11, top_k=20)
    assert (await remote.generate(prompt, seeded)).token_ids == (
        await remote.generate(prompt, seeded)
    ).token_ids


async def test_remote_load_weights_stages_a_checkpoint_and_bumps_the_version(remote, server_url):
    prompt = [1, 9690, 198, 2683]
    before = await remote.generate(prompt, GREEDY)
    version = remote.policy_version + 1
    await remote.load_weights(build_tiny(seed=21).model.state_dict(), version)
    assert httpx.get(f"{server_url}/health").json()["policy_version"] == version
    after = await remote.generate(prompt, GREEDY)
    assert after.policy_version == version
    assert after.token_ids != before.token_ids


async def test_remote_errors_are_typed(remote, tmp_path):
    with pytest.raises(ContextTooLong, match="context"):  # typed across HTTP too
        await remote.generate([1] * 4000, GREEDY)
    with pytest.raises(InvalidRequest, match="temperature") as bad:
        await remote.generate([1, 2], SamplingParams(temperature=-1.0))
    assert not isinstance(bad.value, ContextTooLong)
    with pytest.raises(InvalidRequest, match="no such checkpoint"):
        await remote.load_checkpoint(tmp_path / "missing", 99)
    dead = RemoteEngine("http://127.0.0.1:9", model="x")
    with pytest.raises(EngineError, match="cannot reach"):
        await dead.generate([1, 2], GREEDY)
    await dead.aclose()


class Recorder:
    """A stand-in vLLM or SGLang server: records each call, answers like the real one."""

    def __init__(self, sglang_success: bool = True):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.sglang_success = sglang_success

    def __call__(self, request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path + _query(request), body))
        if request.url.path == "/update_weights_from_disk":
            ok = self.sglang_success
            return httpx.Response(
                200 if ok else 400, json={"success": ok, "message": "" if ok else "bad shapes"}
            )
        return httpx.Response(200)  # vLLM's development routes answer with an empty body


def _query(request: httpx.Request) -> str:
    return f"?{request.url.query.decode()}" if request.url.query else ""


async def test_vllm_and_sglang_reload_a_checkpoint_with_their_own_calls(tmp_path):
    import torch

    vllm = Recorder()
    eng = RemoteEngine(
        "http://vllm:8000/v1",
        kind="vllm",
        staging_dir=tmp_path,
        transport=httpx.MockTransport(vllm),
    )
    await eng.load_weights({"w": torch.ones(2)}, 3)
    ckpt = str(tmp_path / "v3")
    assert vllm.calls == [
        ("POST", "/pause?mode=wait", None),
        ("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": ckpt}}),
        ("POST", "/reset_prefix_cache", None),
        ("POST", "/resume", None),
    ]
    assert eng.policy_version == 3 and eng.delta_route is None  # no deltas: checkpoints only
    await eng.load_weights({"w": torch.zeros(2)}, 4)
    assert vllm.calls[4][1] == "/pause?mode=wait"  # the second sync is a checkpoint too

    sglang = Recorder()
    eng = RemoteEngine(
        "http://sg:30000",
        kind="sglang",
        staging_dir=tmp_path,
        transport=httpx.MockTransport(sglang),
    )
    await eng.load_weights({"w": torch.ones(2)}, 5)
    body = {"model_path": str(tmp_path / "v5"), "flush_cache": True, "weight_version": "5"}
    assert sglang.calls == [("POST", "/update_weights_from_disk", body)]
    failing = RemoteEngine(
        "http://sg:30000",
        kind="sglang",
        staging_dir=tmp_path,
        transport=httpx.MockTransport(Recorder(sglang_success=False)),
    )
    with pytest.raises(InvalidRequest, match="bad shapes"):
        await failing.load_weights({"w": torch.ones(2)}, 6)
    with pytest.raises(ValueError, match="unknown server kind 'tgi'"):
        RemoteEngine("http://x", kind="tgi")  # type: ignore[arg-type]


async def test_vllm_without_its_development_mode_names_the_missing_setting(tmp_path):
    import torch

    def no_dev_routes(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    eng = RemoteEngine(
        "http://vllm:8000",
        kind="vllm",
        staging_dir=tmp_path,
        transport=httpx.MockTransport(no_dev_routes),
    )
    with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1"):
        await eng.load_weights({"w": torch.ones(2)}, 1)


async def test_the_rl_config_gives_its_remote_engines_the_token_for_weight_sync(
    server_url, tmp_path, monkeypatch
):
    """``model.engine_token_file``: what `cheetah train` syncs weights to a tokened server with."""
    from cheetah.rl.config import TrainRunConfig
    from cheetah.rl.task_rollout import remote_engines

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("CHEETAH_API_TOKEN", raising=False)
    (tmp_path / "token").write_text(TOKEN + "\n")
    model = {"engine_urls": [f"{server_url}/v1"], "staging_dir": str(tmp_path / "staging")}
    for token_file, works in ((None, False), (tmp_path / "token", True)):
        cfg = TrainRunConfig.model_validate({"model": model | {"engine_token_file": token_file}})
        [remote] = remote_engines(cfg)
        version = remote.policy_version + 1
        try:
            if works:
                await remote.load_weights(build_tiny(seed=22).model.state_dict(), version)
                assert httpx.get(f"{server_url}/health").json()["policy_version"] == version
            else:
                with pytest.raises(InvalidRequest, match="401"):
                    await remote.load_weights(build_tiny(seed=22).model.state_dict(), version)
        finally:
            await remote.aclose()
