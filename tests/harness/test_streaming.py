"""Streaming: the reply reaches the viewer while it is written, and what is recorded is the
same as without streaming. The terminal test runs ``cheetah agent`` under a pty against a
server that holds the end of its reply until the start of it shows on the terminal, so it
proves streaming without depending on how fast anything runs."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cheetah.harness.chat_stream import ChatStream
from cheetah.harness.loop import run_agent
from cheetah.harness.openai_policy import OpenAIPolicy
from cheetah.harness.policy import Generation, PolicyError, StreamingPolicy
from cheetah.harness.trajectory import Message
from tests.test_cli import cheetah

BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _chunk(text="", *, finish=None, ids=(), lp=(), usage=None, first=False) -> dict:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    if ids:
        choice["token_ids"] = list(ids)
    if lp:
        choice["logprobs"] = {"content": [{"token": "x", "logprob": v} for v in lp]}
    if first:
        choice["prompt_token_ids"] = [1, 2, 3]
    out = {"object": "chat.completion.chunk", "choices": [choice], "policy_version": 4}
    return out | ({"usage": usage} if usage else {})


class SSEServer:
    """An OpenAI-compatible server that streams ``head``, waits until ``shown`` is set (or
    ``hold_s`` passes), then streams ``tail``; ``held`` says whether the wait ended because
    the head was shown."""

    def __init__(self, head: list[dict], tail: list[dict], hold_s: float = 0.0) -> None:
        self.shown, self.held, self.bodies = threading.Event(), None, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                data = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                outer.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for c in head:
                    self._event(c)
                if hold_s:
                    outer.held = outer.shown.wait(hold_s)
                for c in tail:
                    self._event(c)
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, chunk):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shown.set()
        self.httpd.shutdown()
        self.httpd.server_close()


HEAD = [_chunk(first=True), _chunk("Hello wor", ids=[7, 8], lp=[-0.1, -0.2])]
TAIL = [
    _chunk("ld, all done.", ids=[9], lp=[-0.3]),
    _chunk(finish="stop", usage={"prompt_tokens": 3, "completion_tokens": 3}),
]


@pytest.fixture
def sse():
    servers: list[SSEServer] = []
    yield lambda *a, **k: servers.append(SSEServer(*a, **k)) or servers[-1]
    for s in servers:
        s.close()


def test_a_stream_is_put_back_together_as_the_whole_response_would_be():
    stream = ChatStream()
    pieces = [stream.feed_line(f"data: {json.dumps(c)}") for c in HEAD + TAIL]
    assert stream.feed_line("") == "" and stream.feed_line("data: [DONE]") == ""
    assert "".join(pieces) == "Hello world, all done."
    gen = stream.generation()
    assert (gen.token_ids, gen.logprobs, gen.prompt_token_ids) == (
        [7, 8, 9],
        [-0.1, -0.2, -0.3],
        [1, 2, 3],
    )
    assert (gen.finish_reason, gen.completion_tokens, gen.prompt_tokens, gen.policy_version) == (
        "stop", 3, 3, 4
    )  # fmt: skip


def test_a_stream_that_stops_early_or_errs_is_a_policy_error():
    stream = ChatStream("srv")
    stream.feed(HEAD[1])
    with pytest.raises(PolicyError, match="stopped streaming before the reply ended"):
        stream.generation()
    with pytest.raises(PolicyError, match="ended the stream with an error: overloaded"):
        stream.feed_line('data: {"error": {"message": "overloaded"}}')
    with pytest.raises(PolicyError, match="not JSON"):
        stream.feed_line("data: {nope")


async def test_the_openai_policy_streams_and_records_what_the_server_sent(sse, ws):
    srv = sse(HEAD, TAIL)
    policy = OpenAIPolicy(srv.url, max_tokens=32)
    assert isinstance(policy, StreamingPolicy)
    pieces: list[str] = []
    gen = await policy.generate_streaming([Message(role="user", content="hi")], pieces.append)
    assert pieces == ["Hello wor", "ld, all done."] and gen.text == "".join(pieces)
    assert gen.token_ids == [7, 8, 9] and gen.max_new_tokens == 32
    body = srv.bodies[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


class Recorder:
    def __init__(self):
        self.events: list[tuple] = []

    def on_start(self, index):
        self.events.append(("start", index))

    def on_text(self, text):
        self.events.append(("text", text))

    def on_calls(self, turn, calls):
        self.events.append(("calls", [c.name for c in calls]))

    def on_turn(self, traj, turn):
        self.events.append(("turn", turn.index))


async def test_the_loop_streams_to_its_viewer_and_times_the_first_token(ws):
    class Typist:
        """Streams each reply a piece at a time."""

        name = "typist"

        def __init__(self):
            self.replies = [["Looking. ", '<tool name="list_dir"></tool>'], ["Done."]]

        async def generate(self, messages):
            raise AssertionError("a viewer is listening: the loop must stream")

        async def generate_streaming(self, messages, on_text):
            pieces = self.replies.pop(0)
            for piece in pieces:
                on_text(piece)
            return Generation(text="".join(pieces), completion_tokens=3, finish_reason="stop")

    seen = Recorder()
    traj = await run_agent("q", Typist(), ws, events=seen)
    assert traj.stop_reason == "finished"
    assert seen.events == [
        ("start", 0), ("text", "Looking. "), ("text", '<tool name="list_dir"></tool>'),
        ("calls", ["list_dir"]), ("turn", 0), ("start", 1), ("text", "Done."), ("turn", 1),
    ]  # fmt: skip
    assert all(t.first_token_s is not None and t.first_token_s <= t.generate_s for t in traj.turns)
    s = traj.summary()
    assert s["first_token_s"] is not None and s["tokens_per_s"] > 0


async def test_a_policy_that_does_not_stream_shows_its_reply_whole(ws):
    from cheetah.harness.policy import ScriptedPolicy

    seen = Recorder()
    traj = await run_agent("q", ScriptedPolicy(["All good."]), ws, events=seen)
    assert seen.events == [("start", 0), ("text", "All good."), ("turn", 0)]
    assert traj.turns[0].first_token_s is None  # nothing streamed: no time to first token


def _pty_run(argv: list[str], server: SSEServer, partial: bytes) -> tuple[int, str]:
    """Run ``argv`` with a pty as its terminal; set ``server.shown`` once ``partial`` is on
    screen. Returns the exit status and what the terminal showed."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "100",
           "TERM": "xterm-256color"}  # fmt: skip
    env.pop("NO_COLOR", None)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, stdin=secondary, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    out = b""
    deadline = time.monotonic() + 600  # a hang guard only
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    data = os.read(primary, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                out += data
                if partial in ANSI.sub("", out.decode(errors="replace")).encode():
                    server.shown.set()
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=60), ANSI.sub("", out.decode(errors="replace"))
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()


def test_on_a_terminal_the_reply_shows_before_it_ends(sse, sample_repo):
    server = sse(HEAD, TAIL, hold_s=300)
    argv = [str(BIN / "cheetah"), "agent", "Say hello.", "--repo", str(sample_repo),
            "--model", server.url, "--max-turns", "1"]  # fmt: skip
    code, screen = _pty_run(argv, server, b"Hello wor")
    assert code == 0, screen[-3000:]
    assert server.held is True  # the start was on screen while the server held the rest
    assert "Hello world, all done." in screen
    assert "first token" in screen and "tokens_per_s" in screen and "first_token_s" in screen


def test_piped_the_run_is_one_plain_line_per_event(sse, sample_repo):
    head = [_chunk(first=True), _chunk('Listing.\n<tool name="list_dir"></tool>')]
    server = sse(head, [_chunk(finish="stop")])
    r = cheetah("agent", "Look.", "--repo", sample_repo, "--model", server.url, "--max-turns", "1")
    assert r.returncode == 3, r.stderr  # the turn limit stopped it after its call
    lines = r.stdout.splitlines()
    assert "turn 1 | Listing." in lines
    assert "turn 1 call 1: list_dir()" in lines
    assert any(line.startswith("turn 1 result 1: list_dir ok ") for line in lines)
    assert any(line.startswith("turn 1: generate ") and "first token" in line for line in lines)
    assert "stop_reason: limit" in lines and "\x1b[" not in r.stdout
