"""``cheetah serve`` attacked: each finding of the security review, as the attacker sends it.

1. no token: weights swapped by any local process, a path oracle on ``/v1/weights``;
2. a 2 GB body without a token; JSON bodies without a cap;
3. a chat of 100,000 messages tokenized on the event loop;
4. 512 embedding inputs of 100k characters; a 25 MB re-rank request;
5. 500s for a delta of shape ``[2**62, 2**62]``, ``seed = 2**80``, a path under /proc.

Each answer is a 4xx naming the limit, given before the work (or the body read), and the
server keeps serving. Nothing here asserts a duration: timeouts only guard hangs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

import cheetah.inference.server as server
import cheetah.inference.weights_api as weights_api
from cheetah.cli.serve import add_commands, run_serve
from cheetah.core.http_gate import loopback_hosts
from cheetah.inference.embeddings_api import TURN_TEXTS, in_turns
from cheetah.inference.server import create_app
from cheetah.inference.weight_delta import MAGIC, encode_delta, read_header
from cheetah.limits import ServerLimits
from tests.inference.conftest import AUTH, TOKEN, serve_in_thread

pytestmark = pytest.mark.timeout(240)

MiB = 1 << 20
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class CountingEmbedder:
    """An ``Embedder`` that records the size of every batch it is asked to embed."""

    name, dim = "counting-embedder", 4

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return np.full((len(texts), self.dim), 0.5, dtype=np.float32)


class CountingReranker:
    name = "counting-reranker"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return np.arange(len(texts), dtype=np.float32)


def client(app, *, token: str | None = TOKEN, host: str = "127.0.0.1") -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(
        transport=transport, base_url=f"http://{host}", headers=headers, timeout=120
    )


def snapshot(engine) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in engine.model.state_dict().items()}


def snapshot_changed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v + 1 if v.is_floating_point() else v for k, v in state.items()}


def same_weights(engine, before: dict[str, torch.Tensor]) -> bool:
    now = engine.model.state_dict()
    return list(now) == list(before) and all(torch.equal(now[k], before[k]) for k in before)


class ReadRecorder:
    """A request body (async iterable) that records how many bytes the server pulled."""

    def __init__(self, total: int, piece: int = 64 << 10) -> None:
        self.total, self.piece, self.sent = total, piece, 0

    async def __aiter__(self):
        while self.sent < self.total:
            self.sent += self.piece
            yield b" " * self.piece


def raw_exchange(url: str, head: str) -> tuple[int, dict]:
    """Send only a request head (no body) and read the answer: (status, JSON body)."""
    u = httpx.URL(url)
    with socket.create_connection((u.host, u.port), timeout=60) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"closed before an answer: {data!r}"
            data += chunk
        top, _, body = data.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
        while len(body) < int(headers.get("content-length", "0")):
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(lines[0].split()[1]), json.loads(body)


def request_head(path: str, length: int, token: str | None) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"Authorization: Bearer {token}"] if token else []
    return "\r\n".join([*lines, f"Content-Length: {length}"]) + "\r\n\r\n"


# -- 1. authentication --------------------------------------------------------------------
GUARDED = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}),
    ("POST", "/v1/weights", {"path": "/tmp"}),
    ("POST", "/v1/weights/delta", None),
    ("POST", "/v1/embeddings", {"input": ["x"]}),
    ("POST", "/v1/rerank", {"query": "q", "documents": ["x"]}),
    ("GET", "/docs", None),
    ("GET", "/openapi.json", None),
]


async def test_with_a_token_every_route_but_health_needs_it(engine):
    embedder, reranker = CountingEmbedder(), CountingReranker()
    app = create_app(engine, "tiny", embedder=embedder, reranker=reranker, token=TOKEN)
    before = snapshot(engine)
    for token in (None, "wrong-token-wrong-token-wrong!!"):
        async with client(app, token=token) as c:
            for method, path, body in GUARDED:
                r = await c.request(method, path, json=body)
                assert r.status_code == 401, (token, path)
                assert r.headers["www-authenticate"] == "Bearer"
                assert r.json() == {"error": {"message": "missing or wrong bearer token",
                                              "type": "authentication_error"}}  # fmt: skip
            assert (await c.get("/health")).status_code == 200
    assert embedder.calls == [] and reranker.calls == [] and same_weights(engine, before)
    async with client(app) as c:
        assert (await c.get("/v1/models")).status_code == 200
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await c.get("/docs")).status_code == 404  # no API docs at all


async def test_without_a_token_the_weight_routes_are_refused_even_on_loopback(engine, tmp_path):
    from cheetah.model.loading import build_tiny

    build_tiny(seed=9).model.save_pretrained(tmp_path / "other")
    state = snapshot(engine)
    blob = encode_delta(state, snapshot_changed(state), engine.policy_version, 1)
    app = create_app(engine, "tiny", allowed_hosts=loopback_hosts("127.0.0.1"))
    for token in (None, TOKEN):  # a bearer the server has no token to compare with changes nothing
        async with client(app, token=token) as c:
            r = await c.post("/v1/weights", json={"path": str(tmp_path / "other")})
            assert r.status_code == 403 and "--token-file" in r.json()["error"]["message"]
            assert r.json()["error"]["type"] == "permission_error"
            r = await c.post("/v1/weights/delta", content=blob)
            assert r.status_code == 403
            # no oracle either: a path that exists and one that does not answer the same
            exists = await c.post("/v1/weights", json={"path": "/root"})
            missing = await c.post("/v1/weights", json={"path": "/root/nothing-here"})
            assert exists.status_code == missing.status_code == 403
            assert exists.json() == missing.json()
            assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert same_weights(engine, state) and engine.policy_version == 0


async def test_a_wrong_token_is_refused_before_a_byte_of_the_body_is_read(engine):
    app = create_app(engine, "tiny", token=TOKEN)
    for path in ("/v1/weights/delta", "/v1/chat/completions", "/v1/weights"):
        body = ReadRecorder(8 * MiB)
        async with client(app, token="not-the-token-not-the-token!") as c:
            r = await c.post(path, content=body)
        assert r.status_code == 401 and body.sent == 0, path


async def test_a_foreign_host_name_is_misdirected(engine):
    """DNS rebinding: a page whose own name now resolves to 127.0.0.1 sends that name."""
    app = create_app(engine, "tiny", allowed_hosts=loopback_hosts("127.0.0.1"))
    async with client(app, host="evil.example") as c:
        for path in ("/health", "/v1/models"):
            r = await c.get(path)
            assert r.status_code == 421 and "evil.example" in r.json()["error"]["message"]
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
        async with client(app, host=host) as c:
            assert (await c.get("/v1/models")).status_code == 200, host


def test_serve_will_not_listen_beyond_loopback_without_a_token(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="cheetah")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--model", "tiny"])
    assert run_serve(args) == 2  # before any model is loaded
    err = capsys.readouterr().err
    assert "--host 0.0.0.0" in err and "--token-file" in err
    short = tmp_path / "short"
    short.write_text("secret")
    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--token-file", str(short)])
    assert run_serve(args) == 2 and "at least 16 characters" in capsys.readouterr().err
    bad = tmp_path / "limits.toml"
    bad.write_text("serve_max_messages = 0\n")
    args = parser.parse_args(["serve", "--model", "tiny", "--limits", str(bad)])
    assert run_serve(args) == 2 and "serve_max_messages" in capsys.readouterr().err
    cheetah = Path(sys.executable).parent / "cheetah"
    proc = subprocess.run(
        [cheetah, "serve", "--host", "0.0.0.0", "--model", "tiny"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--token-file" in proc.stderr


# -- 2. bodies ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live(tiny):
    """A live server with a token over its own engine, embedder and re-ranker."""
    import copy

    from cheetah.inference.local import LocalEngine

    engine = LocalEngine(copy.deepcopy(tiny.model), tiny.tokenizer, max_batch=4)
    app = create_app(
        engine, "tiny", embedder=CountingEmbedder(), reranker=CountingReranker(), token=TOKEN
    )
    url, stop = serve_in_thread(app)
    yield url
    stop()
    engine.close()


def test_a_2gb_body_is_refused_without_being_read(live):
    two_gb = 2 << 30
    status, body = raw_exchange(live, request_head("/v1/weights/delta", two_gb, None))
    assert status == 401  # no token: refused before the size is even looked at
    for path in ("/v1/weights/delta", "/v1/chat/completions", "/v1/embeddings"):
        status, body = raw_exchange(live, request_head(path, two_gb, TOKEN))
        assert status == 413, path
        assert str(two_gb) in body["error"]["message"], body
        assert body["error"]["type"] == "request_too_large"
    r = httpx.post(f"{live}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=60)
    assert r.status_code == 200  # still serving


async def test_chunked_bodies_over_the_cap_are_refused_as_they_arrive(engine):
    limits = ServerLimits(serve_max_body_bytes=64 << 10, serve_max_delta_bytes=MiB)
    app = create_app(engine, "tiny", token=TOKEN, limits=limits)
    async with client(app) as c:
        for path, cap in (("/v1/chat/completions", 64 << 10), ("/v1/weights/delta", MiB)):
            body = ReadRecorder(64 * MiB)
            r = await c.post(path, content=body)
            assert r.status_code == 413 and str(cap) in r.json()["error"]["message"], path
            assert body.sent <= cap + 2 * body.piece  # read up to the cap, not to the end


def test_the_delta_cap_defaults_to_twice_the_model_plus_64_mib(engine):
    held = sum(t.numel() * t.element_size() for t in engine.model.state_dict().values())
    assert server.delta_cap(engine, ServerLimits()) == 2 * held + 64 * MiB
    assert server.delta_cap(engine, ServerLimits(serve_max_delta_bytes=5)) == 5


# -- 3. chats ---------------------------------------------------------------------------------
async def test_a_chat_of_100000_messages_is_refused_before_tokenization(engine, monkeypatch):
    tokenized: list[int] = []
    real = server.prompt_token_ids

    def recorded(messages, tokenizer):
        tokenized.append(len(messages))
        return real(messages, tokenizer)

    monkeypatch.setattr(server, "prompt_token_ids", recorded)
    app = create_app(engine, "tiny", token=TOKEN)
    many = [{"role": "user", "content": "x"}] * 100_000
    async with client(app) as c:
        r = await c.post("/v1/chat/completions", json=dict(CHAT, messages=many))
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "messages: 100000; at most 1024 (serve_max_messages)"
        wizards = [{"role": "wizard", "content": "x"}] * 100_000
        r = await c.post("/v1/chat/completions", json=dict(CHAT, messages=wizards))
        assert r.status_code == 400 and len(r.text) < 2000  # 5 problems named, not 100,000
        assert r.json()["error"]["message"].endswith("; and 99995 more")
        # within serve_max_messages, but past the context at the template's tokens a message
        # (tokenizing a chat costs the square of its messages)
        r = await c.post("/v1/chat/completions", json=dict(CHAT, messages=many[:1000]))
        assert r.status_code == 400 and r.json()["error"]["type"] == "context_length_exceeded"
        assert "1000 messages of at least" in r.json()["error"]["message"]
        long = [{"role": "user", "content": "y" * 1_000_000}] * 3
        r = await c.post("/v1/chat/completions", json=dict(CHAT, messages=long))
        assert r.status_code == 400 and "(serve_max_prompt_chars)" in r.json()["error"]["message"]
        r = await c.post("/v1/completions", json={"prompt": "z" * 2_500_000, "max_tokens": 1})
        assert r.status_code == 400 and "prompt: 2500000 characters" in r.json()["error"]["message"]
        ids = [{"role": "assistant", "content": "a", "token_ids": [1] * 5000}]
        r = await c.post("/v1/chat/completions", json=dict(CHAT, messages=ids))
        assert r.status_code == 400 and r.json()["error"]["type"] == "context_length_exceeded"
        assert tokenized == []
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert tokenized == [1]


async def test_health_answers_while_a_prompt_is_tokenized(engine, monkeypatch):
    """Ordering, not timing: tokenization waits until /health has answered; were it on the
    event loop, /health could only answer after it (the wait gives up after 30 s)."""
    started, release, order = threading.Event(), threading.Event(), []
    real = server.prompt_token_ids

    def held(messages, tokenizer):
        started.set()
        release.wait(timeout=30)
        order.append("tokenized")
        return real(messages, tokenizer)

    monkeypatch.setattr(server, "prompt_token_ids", held)
    app = create_app(engine, "tiny", token=TOKEN)
    async with client(app) as c:
        chat = asyncio.create_task(c.post("/v1/chat/completions", json=CHAT))
        assert await asyncio.to_thread(started.wait, 30)
        assert (await c.get("/health")).status_code == 200
        order.append("health")
        release.set()
        assert (await chat).status_code == 200
    assert order == ["health", "tokenized"]


# -- 4. embeddings and re-ranking ---------------------------------------------------------------
async def test_embedding_requests_are_bounded_before_any_text_is_embedded():
    embedder = CountingEmbedder()
    app = create_app(None, "none", embedder=embedder, token=TOKEN)
    cases = [
        (["x"] * 512, "input: 512 texts; at most 256 a request (serve_max_inputs)"),
        (["x", "y" * 100_001], "input[1]: 100001 characters; at most 100000"),
        (["w" * 100_000] * 11, "input: 1100000 characters in all; at most 1000000"),
    ]
    async with client(app) as c:
        for texts, message in cases:
            r = await c.post("/v1/embeddings", json={"input": texts})
            assert r.status_code == 400 and message in r.json()["error"]["message"]
        r = await c.post("/v1/embeddings", json={"input": ["z" * 100_000] * 512})
        assert r.status_code == 413  # 51 MB: over serve_max_body_bytes, refused unread
        assert embedder.calls == []
        r = await c.post("/v1/embeddings", json={"input": ["ok"] * 256})
        assert r.status_code == 200 and embedder.calls == [TURN_TEXTS] * (256 // TURN_TEXTS)


async def test_a_large_request_takes_turns_so_a_small_one_waits_for_one_turn_not_all():
    """Ordering, not timing (issue 44: three largest embedding requests made another client
    wait 11 s): while a 256-text request's first turn runs, a 1-text request comes; it is
    served next, before the large request's other turns (``bench/serve_fairness.py`` times
    it)."""
    started, release = threading.Event(), threading.Event()
    embedder = CountingEmbedder()

    def first_turn_held(texts):
        if not embedder.calls:
            started.set()
            release.wait(timeout=30)
        return embedder.embed(texts)

    turn = asyncio.Lock()
    large = asyncio.create_task(in_turns(turn, first_turn_held, ["x" * 500] * 256))
    assert await asyncio.to_thread(started.wait, 30)
    small = asyncio.create_task(in_turns(turn, first_turn_held, ["y"]))
    await asyncio.sleep(0)  # the small request runs until it waits for the lock
    release.set()
    assert (await small).shape == (1, 4) and (await large).shape == (256, 4)
    assert embedder.calls[:2] == [TURN_TEXTS, 1] and sum(embedder.calls) == 257


async def test_rerank_requests_are_bounded_before_any_pair_is_scored():
    reranker = CountingReranker()
    app = create_app(None, "none", reranker=reranker, token=TOKEN)
    async with client(app) as c:
        one_big = {"query": "q", "documents": ["d" * 25_000_000]}  # a 25 MB body, under 32 MiB
        r = await c.post("/v1/rerank", json=one_big)
        assert r.status_code == 400 and "(serve_max_input_chars)" in r.json()["error"]["message"]
        many = {"query": "q", "documents": ["d" * 100_000] * 250}
        r = await c.post("/v1/rerank", json=many)
        assert r.status_code == 400 and "(serve_max_request_chars)" in r.json()["error"]["message"]
        r = await c.post("/v1/rerank", json={"query": "q" * 100_001, "documents": ["d"]})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("query: 100001")
        r = await c.post("/v1/rerank", json={"query": "q", "documents": ["d"] * 300})
        assert r.status_code == 400 and "(serve_max_inputs)" in r.json()["error"]["message"]
        r = await c.post("/v1/rerank", json={"query": "q", "documents": ["d" * 40 * MiB]})
        assert r.status_code == 413
        assert reranker.calls == []
        r = await c.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]})
        assert r.status_code == 200 and reranker.calls == [2]


# -- 5. malformed input: 400, never 500 --------------------------------------------------------
def with_header(blob: bytes, edit) -> bytes:
    """``blob`` with its JSON header changed by ``edit`` (payload unchanged)."""
    header, offset = read_header(blob)
    edit(header)
    raw = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(raw)) + raw + blob[offset:]


async def test_a_delta_with_an_absurd_or_foreign_header_is_refused_and_nothing_changes(engine):
    app = create_app(engine, "tiny", token=TOKEN)
    before = snapshot(engine)
    blob = encode_delta(before, snapshot_changed(before), 0, 1)
    name = read_header(blob)[0]["tensors"][0]["name"]

    def shape(value):
        return lambda h: h["tensors"][0].update(shape=value)

    def rename(h):
        h["tensors"][0]["name"] = "model.backdoor.weight"

    cases = [
        (shape([2**62, 2**62]), 400, "would hold"),
        (shape([2**20, 2**20, 2**20]), 400, "would hold"),
        (shape([7, 3]), 409, f"tensor {name}: the delta's shape is [7, 3]"),
        (rename, 409, "tensor model.backdoor.weight: the delta has it"),
        (lambda h: h["tensors"].append(dict(h["tensors"][0])), 400, "names a tensor twice"),
    ]
    async with client(app) as c:
        for edit, status, message in cases:
            r = await c.post("/v1/weights/delta", content=with_header(blob, edit))
            assert r.status_code == status and message in r.json()["error"]["message"], r.text
        deep = MAGIC + struct.pack("<Q", 200_000) + b"[" * 100_000 + b"]" * 100_000
        r = await c.post("/v1/weights/delta", content=deep)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        assert same_weights(engine, before) and engine.policy_version == 0
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
        r = await c.post("/v1/weights/delta", content=blob)  # the honest delta still loads
        assert r.status_code == 200 and engine.policy_version == 1


async def test_seeds_and_sampling_values_out_of_range_are_400(engine):
    app = create_app(engine, "tiny", token=TOKEN)
    async with client(app) as c:
        for extra, needle in (
            ({"seed": 2**80}, "seed"),
            ({"seed": 2**63}, "seed"),
            ({"seed": -1}, "seed"),
            ({"top_k": 2**80}, "top_k"),
            ({"stop": ["s"] * 100}, "stop"),
            ({"stop": ["s" * 5000]}, "stop"),
            ({"stop_token_ids": [1] * 5000}, "stop_token_ids"),
            ({"max_tokens": 2**80}, "context"),
        ):
            for path, body in (
                ("/v1/chat/completions", CHAT),
                ("/v1/completions", {"prompt": "x"}),
            ):
                r = await c.post(path, json=body | extra)
                assert r.status_code == 400 and needle in r.json()["error"]["message"], extra
        r = await c.post("/v1/chat/completions", json=CHAT | {"seed": 2**63 - 1})
        assert r.status_code == 200
        r = await c.post("/v1/weights", json={"path": "/tmp", "version": 2**80})
        assert r.status_code == 400 and "version" in r.json()["error"]["message"]


async def test_checkpoint_paths_that_cannot_be_read_are_400(engine, tmp_path, monkeypatch):
    app = create_app(engine, "tiny", token=TOKEN)
    secret = tmp_path / "root-only"
    secret.mkdir()
    (secret / "model.safetensors").write_bytes(b"x")
    secret.chmod(0)
    cases = [
        ("/proc/1/root", "may not lie under /proc"),
        ("/proc/self/environ", "may not lie under /proc"),
        ("/sys/kernel", "may not lie under /proc, /sys, /dev"),
        ("/dev/zero", "may not lie under"),
        (str(tmp_path), "no *.safetensors files"),
        (str(tmp_path / "missing"), "no such checkpoint"),
        ("bad\0path", "NUL"),
    ]
    try:
        async with client(app) as c:
            for path, needle in cases:
                r = await c.post("/v1/weights", json={"path": path})
                assert r.status_code == 400 and needle in r.json()["error"]["message"], path
            if os.geteuid() != 0:  # root reads it anyway: the next case stands in for it
                r = await c.post("/v1/weights", json={"path": str(secret)})
                assert r.status_code == 400 and "cannot read" in r.json()["error"]["message"]

            def denied(path):
                raise PermissionError(13, "Permission denied", path)

            monkeypatch.setattr(weights_api, "read_state_dict", denied)
            r = await c.post("/v1/weights", json={"path": str(secret)})
            assert r.status_code == 400
            assert r.json()["error"]["message"] == f"{secret}: cannot read it (Permission denied)"
    finally:
        secret.chmod(0o700)
    assert engine.policy_version == 0
