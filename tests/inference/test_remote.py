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

GREEDY = SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True)


@pytest.fixture
async def remote(server_url, tmp_path):
    eng = RemoteEngine(server_url, staging_dir=tmp_path / "staging")
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
