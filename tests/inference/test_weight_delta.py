"""Lossless weight deltas: bit-exact round trips, typed mismatches, and the remote sync path."""

from __future__ import annotations

import copy
import json
import struct

import httpx
import pytest
import torch

from cheetah.inference.local import LocalEngine
from cheetah.inference.remote import RemoteEngine
from cheetah.inference.server import create_app
from cheetah.inference.weight_delta import (
    MAGIC,
    DeltaMismatch,
    MalformedDelta,
    apply_delta,
    encode_delta,
    read_header,
)
from cheetah.limits import ServerLimits
from cheetah.model.loading import build_tiny
from tests.inference.conftest import AUTH, TOKEN, serve_in_thread

# inf, -inf, quiet NaN, signalling NaN, NaN with every payload bit, -0.0, the smallest denormal
SPECIAL_BITS = {
    torch.float32: [0x7F800000, -0x00800000, 0x7FC00000, 0x7F800001, -1, -(2**31), 1],
    torch.bfloat16: [0x7F80, -0x0080, 0x7FC0, 0x7F81, -1, -(2**15), 1],
}
INT_OF = {torch.float32: torch.int32, torch.bfloat16: torch.int16}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _assert_bit_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(_bits(got[name]), _bits(tensor)), name


def _with_special_bits(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    special = torch.tensor(SPECIAL_BITS[t.dtype], dtype=INT_OF[t.dtype])
    t.view(INT_OF[t.dtype]).reshape(-1)[: len(special)] = special
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_is_bit_exact_including_nan_and_inf_bit_patterns(dtype):
    g = torch.Generator().manual_seed(0)
    base = {
        "w": torch.randn(300, 40, generator=g).to(dtype),
        "special": _with_special_bits(torch.randn(64, generator=g).to(dtype)),
        "reshaped": torch.randn(8, 8, generator=g).to(dtype),
        "scalar": torch.tensor(2.5, dtype=dtype),
        "dropped": torch.randn(5, generator=g).to(dtype),
    }
    width = torch.empty((), dtype=dtype).element_size()
    random_bytes = torch.randint(0, 256, (300 * 40 * width,), generator=g, dtype=torch.uint8)
    new = {
        "w": random_bytes.view(dtype).reshape(300, 40),  # any bit pattern, NaN payloads too
        "special": _with_special_bits(torch.randn(64, generator=g).to(dtype)).flip(0),
        "reshaped": torch.randn(4, 16, generator=g).to(dtype),
        "scalar": torch.tensor(float("-inf"), dtype=dtype),
        "added": torch.randn(7, generator=g).to(dtype),
    }
    new["tied"] = new["w"]
    blob = encode_delta(base, new, 4, 5)
    modes = {e["name"]: e["mode"] for e in read_header(blob)[0]["tensors"]}
    assert modes == {
        "w": "xor",
        "special": "xor",
        "reshaped": "whole",
        "scalar": "xor",
        "added": "whole",
        "tied": "same",
    }
    out, version = apply_delta(base, blob, held_version=4)
    assert version == 5
    _assert_bit_equal(out, new)


@pytest.mark.parametrize(("dtype", "bound"), [(torch.float32, 0.75), (torch.bfloat16, 0.45)])
def test_a_small_update_compresses_well_below_its_raw_size(dtype, bound):
    g = torch.Generator().manual_seed(1)
    weights = torch.randn(1_000_000, generator=g) * 0.02  # an initialised layer's scale
    base = {"w": weights.to(dtype)}
    new = {"w": (weights + 1e-4 * torch.randn(1_000_000, generator=g)).to(dtype)}
    raw = new["w"].numel() * new["w"].element_size()
    blob = encode_delta(base, new, 0, 1)
    # measured: 0.64 (fp32), 0.27 (bf16); unchanged weights cost almost nothing
    assert len(blob) / raw < bound
    assert len(encode_delta(base, base, 0, 1)) / raw < 0.01
    _assert_bit_equal(apply_delta(base, blob, 0)[0], new)


def _pair() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    base = {"a": torch.randn(6, 4), "b": torch.randn(3)}
    return base, {k: v + 1e-3 for k, v in base.items()}


def test_a_blob_against_another_base_version_is_a_mismatch():
    base, new = _pair()
    blob = encode_delta(base, new, 3, 4)
    with pytest.raises(DeltaMismatch, match=r"against policy version 3.*holds version 7"):
        apply_delta(base, blob, held_version=7)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.update(a=torch.randn(4, 6)), r"tensor a: .*float32 \[6, 4\].*\[4, 6\]"),
        (lambda b: b.update(a=b["a"].double()), "tensor a: .*holds float64"),
        (lambda b: b.pop("b"), "tensor b, which the receiver lacks"),
        (lambda b: b.update(b=b["b"] + 1), "tensor b: the receiver's weights differ"),
    ],
    ids=["shape", "dtype", "missing", "content"],
)
def test_a_receiver_holding_other_tensors_gets_a_mismatch_naming_them(change, message):
    base, new = _pair()
    blob = encode_delta(base, new, 3, 4)
    held = dict(base)
    change(held)
    with pytest.raises(DeltaMismatch, match=message):
        apply_delta(held, blob, held_version=3)


def _rewritten(blob: bytes, edit) -> bytes:
    """``blob`` with its JSON header changed by ``edit`` (the payload as it was)."""
    header, offset = read_header(blob)
    edit(header)
    raw = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(raw)) + raw + blob[offset:]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: h["tensors"][0].update(shape=[2**62, 2**62]), "would hold"),  # OverflowError
        (lambda h: h["tensors"][0].update(shape=[2**19, 2**19]), "over this receiver's limit"),
        (lambda h: h["tensors"][0].update(mode="whole", shape=[2**30]), "receiver's limit"),
        (lambda h: h["tensors"][0].update(shape=[1] * 65), "malformed tensor list"),
        (lambda h: h["tensors"][0].update(dtype="__class__"), "unknown dtype"),
        (lambda h: h["tensors"].append(h["tensors"][0]), "names a tensor twice"),
    ],
    ids=["2**124 elements", "1 TiB", "4 GiB whole", "65 dims", "not a dtype", "twice"],
)
def test_a_header_declaring_absurd_tensors_is_refused_before_any_allocation(edit, message):
    """Sized on Python ints before anything is allocated or decompressed: no OverflowError,
    no giant buffer (zstd preallocates what it is told a plane holds)."""
    base, new = _pair()
    blob = _rewritten(encode_delta(base, new, 3, 4), edit)
    with pytest.raises(MalformedDelta, match=message):
        apply_delta(base, blob, held_version=3)


def test_max_bytes_bounds_what_a_delta_may_decode_to():
    base, new = _pair()
    blob = encode_delta(base, new, 3, 4)
    with pytest.raises(MalformedDelta, match="over this receiver's limit of 50 bytes"):
        apply_delta(base, blob, held_version=3, max_bytes=50)
    _assert_bit_equal(apply_delta(base, blob, held_version=3, max_bytes=(6 * 4 + 3) * 4)[0], new)


def test_bytes_that_are_not_a_whole_delta_are_malformed():
    base, new = _pair()
    blob = encode_delta(base, new, 3, 4)
    for bad in (b"not a delta", blob[:-10], b"CHTDELTA" + blob[8:20]):
        with pytest.raises(MalformedDelta):
            apply_delta(base, bad, held_version=3)


# -- the remote path ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def delta_server():
    """A live cheetah server whose engine the tests can inspect."""
    engine = LocalEngine.from_loaded(build_tiny(), max_batch=8)
    url, stop = serve_in_thread(create_app(engine, "tiny", token=TOKEN))
    yield url, engine
    stop()
    engine.close()


def _optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()


async def test_successive_syncs_go_as_deltas_and_match_the_trainer_bit_for_bit(
    delta_server, tmp_path
):
    url, engine = delta_server
    trainer = copy.deepcopy(build_tiny(seed=3).model)
    opt = torch.optim.AdamW(trainer.parameters(), lr=1e-5)
    remote = RemoteEngine(url, staging_dir=tmp_path, api_key=TOKEN)
    held = httpx.get(f"{url}/health").json()["policy_version"]
    try:
        await remote.load_weights(trainer.state_dict(), held + 1)
        assert remote.last_sync.mode == "full"
        assert remote.last_sync.fallback == "first sync to this server"
        raw = sum(t.numel() * t.element_size() for t in trainer.state_dict().values())
        for version in (held + 2, held + 3):
            _optimizer_step(trainer, opt)
            # the live tensors, which the next step changes in place: the client keeps a copy
            await remote.load_weights(trainer.state_dict(), version)
            assert remote.last_sync.mode == "delta", remote.last_sync
            assert remote.last_sync.delta_bytes < 0.8 * raw
            assert httpx.get(f"{url}/health").json()["policy_version"] == version
            _assert_bit_equal(engine.model.state_dict(), trainer.state_dict())
    finally:
        await remote.aclose()


async def test_a_server_that_moved_on_gets_a_full_checkpoint(delta_server, tmp_path):
    url, engine = delta_server
    trainer = copy.deepcopy(build_tiny(seed=4).model)
    remote = RemoteEngine(url, staging_dir=tmp_path / "a", api_key=TOKEN)
    other = RemoteEngine(url, staging_dir=tmp_path / "b", api_key=TOKEN)
    v = httpx.get(f"{url}/health").json()["policy_version"] + 1
    try:
        await remote.load_weights(trainer.state_dict(), v)
        # another writer loads other weights under the same version: the delta's base check
        # refuses it (409) and the client falls back
        await other.load_weights(build_tiny(seed=5).model.state_dict(), v)
        with torch.no_grad():
            trainer.model.norm.weight.add_(0.5)
        await remote.load_weights(trainer.state_dict(), v + 1)
        assert remote.last_sync.mode == "full"
        assert "refused the delta" in remote.last_sync.fallback
        assert "409" in remote.last_sync.fallback and "differ" in remote.last_sync.fallback
        _assert_bit_equal(engine.model.state_dict(), trainer.state_dict())

        # ... and under a later version: the client sees it in /health and sends no delta
        await other.load_weights(build_tiny(seed=6).model.state_dict(), v + 5)
        await remote.load_weights(trainer.state_dict(), v + 6)
        assert remote.last_sync.mode == "full"
        assert f"holds version {v + 5}" in remote.last_sync.fallback
        _assert_bit_equal(engine.model.state_dict(), trainer.state_dict())
    finally:
        await remote.aclose()
        await other.aclose()


def test_the_delta_route_answers_409_on_a_version_mismatch(delta_server):
    url, engine = delta_server
    held = httpx.get(f"{url}/health").json()["policy_version"]
    state = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    blob = encode_delta(state, state, held + 100, held + 101)
    resp = httpx.post(f"{url}/v1/weights/delta", content=blob, headers=AUTH)
    assert resp.status_code == 409
    assert f"holds version {held}" in resp.json()["error"]["message"]
    resp = httpx.post(f"{url}/v1/weights/delta", content=b"junk", headers=AUTH)
    assert resp.status_code == 400 and "bad magic" in resp.json()["error"]["message"]
    assert httpx.get(f"{url}/health").json()["policy_version"] == held


async def test_the_delta_route_refuses_bodies_over_its_limit(delta_server):
    _, engine = delta_server
    app = create_app(engine, "tiny", token=TOKEN, limits=ServerLimits(serve_max_delta_bytes=100))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://t", headers=AUTH
    ) as c:
        resp = await c.post("/v1/weights/delta", content=b"x" * 101)
    assert resp.status_code == 413 and "limit of 100 bytes" in resp.json()["error"]["message"]
    assert resp.json()["error"]["type"] == "request_too_large"
