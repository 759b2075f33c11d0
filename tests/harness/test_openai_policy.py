"""OpenAIPolicy against a real HTTP server started by the test (stdlib, on loopback)."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cheetah.harness.loop import AgentError, run_agent
from cheetah.harness.openai_policy import OpenAIPolicy
from cheetah.harness.policy import PolicyError
from cheetah.harness.trajectory import Message


class FakeServer:
    """Replies to /v1/chat/completions with queued messages; records the requests."""

    def __init__(self, replies, status=200):
        self.replies, self.status, self.requests = list(replies), status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "fake-model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                if outer.status != 200:
                    return self._send(outer.status, {"error": {"message": "engine overloaded"}})
                text, finish = outer.replies.pop(0), "stop"
                if isinstance(text, tuple):  # (text, finish_reason)
                    text, finish = text
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "policy_version": 3,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": finish,
                                "token_ids": [11, 12],
                                "message": {"role": "assistant", "content": text},
                                "logprobs": {
                                    "content": [
                                        {"token": "a", "logprob": -0.5},
                                        {"token": "b", "logprob": -1.5},
                                    ]
                                },
                            }
                        ],
                        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []
    yield lambda *a, **k: servers.append(FakeServer(*a, **k)) or servers[-1]
    for s in servers:
        s.close()


async def test_agent_runs_against_an_openai_compatible_server(server, ws):
    (ws.root / "a.txt").write_text("hello\n")
    srv = server(['<tool name="read_file"><path>a.txt</path></tool>', "It says hello."])
    policy = OpenAIPolicy(srv.url, api_key="sk-test", temperature=0.2, max_tokens=64)
    traj = await run_agent("What does a.txt say?", policy, ws)
    assert traj.stop_reason == "finished"
    assert traj.turns[0].calls[0].output == "     1\thello"
    path, headers, body = srv.requests[1]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "fake-model" and body["temperature"] == 0.2 and body["max_tokens"] == 64
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][3]["content"].startswith('<tool_result name="read_file" index="1">')
    turn = traj.turns[1]
    assert (turn.token_ids, turn.logprobs, turn.policy_version, turn.prompt_tokens) == (
        [11, 12],
        [-0.5, -1.5],
        3,
        40,
    )


async def test_a_reply_the_server_cut_at_max_tokens_ends_as_a_limit(server, ws):
    srv = server([("I will start by readi", "length")])
    policy = OpenAIPolicy(srv.url, max_tokens=2)
    traj = await run_agent("q", policy, ws)
    assert traj.stop_reason == "limit" and "max_new_tokens=2" in traj.stop_detail
    assert traj.turns[0].finish_reason == "length"


async def test_server_errors_become_policy_errors(server, ws):
    srv = server([], status=503)
    policy = OpenAIPolicy(srv.url, model="m")
    with pytest.raises(PolicyError, match=r"answered 503: .*engine overloaded"):
        await policy.generate([Message(role="user", content="hi")])
    with pytest.raises(AgentError) as info:
        await run_agent("q", policy, ws)
    traj = info.value.trajectory
    assert traj.stop_reason == "error" and "503" in traj.stop_detail


async def test_unreachable_server_is_a_clear_error():
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", model="m", timeout_s=2)
    with pytest.raises(
        PolicyError, match=re.escape("cannot reach http://127.0.0.1:9/v1/chat/completions")
    ):
        await policy.generate([Message(role="user", content="hi")])
