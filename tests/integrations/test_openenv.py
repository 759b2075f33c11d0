"""cheetah's tasks served as an OpenEnv environment (the ``openenv`` extra), driven by
OpenEnv's own client over its WebSocket protocol: a scripted episode graded 1.0, the tiny
model's episode graded, the token, unknown tasks and the connection cap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest

from cheetah.model.loading import build_tiny
from cheetah.tasks.session import local_sessions
from tests.tasks.conftest import bug_task, build_repo

pytest.importorskip(
    "openenv",
    reason="the openenv extra is not installed (it cannot share a venv with verifiers): "
    "make test-openenv",
)

import uvicorn
from openenv.core import GenericEnvClient

from cheetah.core.http_gate import SettingError
from cheetah.integrations.openenv_server import cheetah_app, server_token

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOKEN = "t" * 32
FIX = (
    '<tool name="edit_file"><path>calc/ops.py</path><old_str>return a - b</old_str>'
    "<new_str>return a + b</new_str></tool>"
)


@contextlib.contextmanager
def serving(app):
    """``app`` on a free port, in a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert time.monotonic() < deadline, "the OpenEnv server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def server(tmp_path):
    task = bug_task(build_repo(tmp_path / "calc_repo"))
    with serving(
        cheetah_app([task], lambda: local_sessions("local"), TOKEN, max_episodes=2)
    ) as url:
        yield url


def client(url: str, token: str = TOKEN) -> GenericEnvClient:
    return GenericEnvClient(
        base_url=url, message_timeout_s=300, headers={"Authorization": f"Bearer {token}"}
    )


async def test_a_scripted_episode_is_graded_through_openenvs_client(server):
    async with client(server) as env:
        r = await env.reset(task_id="calc-add")
        new = r.observation["new"]
        assert [m["role"] for m in new] == ["system", "user"] and "edit_file" in new[0]["content"]
        r = await env.step({"message": FIX})
        assert not r.done and "Edited calc/ops.py" in r.observation["new"][0]["content"]
        r = await env.step({"message": "Fixed: add() adds again."})
        assert r.done and r.reward == pytest.approx(1.0)
        assert r.metadata["grade"]["correct"] and r.metadata["stop_reason"] == "finished"
        assert r.metadata["truncated"] is False
        # the connection runs the next episode on a fresh session
        r = await env.reset(task_id="calc-add")
        r = await env.step({"message": "Nothing to do."})
        assert r.done and r.reward == 0.0 and not r.metadata["grade"]["correct"]


async def test_the_tiny_model_plays_an_episode(server):
    tiny = build_tiny()
    async with client(server) as env:
        r = await env.reset(task_id="calc-add")
        messages = r.observation["messages"]
        for _ in range(3):
            ids = tiny.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = tiny.model.generate(**ids, max_new_tokens=24, do_sample=False)
            text = tiny.tokenizer.decode(
                out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True
            )
            r = await env.step({"message": text})
            messages = r.observation["messages"]
            if r.done:
                break
        if not r.done:  # the tiny model's words may all be tool calls: end the episode
            r = await env.step({"message": "Done."})
        assert r.done and r.reward in (0.0, pytest.approx(1.0), pytest.approx(0.8))
        assert "grade" in r.metadata and messages[0]["role"] == "system"


async def test_the_server_refuses_without_the_token_unknown_tasks_and_past_its_cap(server):
    with pytest.raises(ConnectionError, match="403"):  # refused before the handshake
        async with client(server, token="w" * 32) as env:
            await env.reset(task_id="calc-add")
    async with client(server) as env:
        with pytest.raises(RuntimeError, match="no task 'nope'"):
            await env.reset(task_id="nope")
    a, b, c = client(server), client(server), client(server)
    try:
        await a.reset(task_id="calc-add")
        await b.reset(task_id="calc-add")
        with pytest.raises((RuntimeError, ConnectionError), match=r"(?i)capacity"):
            await c.reset(task_id="calc-add")
    finally:
        await asyncio.gather(a.close(), b.close(), c.close(), return_exceptions=True)


def test_http_routes_need_the_token_and_the_stateless_ones_are_off(server):
    import httpx

    assert httpx.get(f"{server}/health").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server}/health", headers=auth).status_code == 200
    # production mode: no /reset or /step opening a session per request
    assert httpx.post(f"{server}/reset", json={}, headers=auth).status_code in (404, 405)


def test_docs_are_off_and_a_foreign_host_is_refused(server):
    """Issue 44: the server answered /docs and /openapi.json and any Host header (a page
    rebinding its DNS name to 127.0.0.1 reached it); now it is behind ``HttpGate``."""
    import httpx

    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert httpx.get(f"{server}{path}", headers=auth).status_code == 404, path
    rebound = httpx.get(f"{server}/health", headers={**auth, "Host": "evil.example:8010"})
    assert rebound.status_code == 421
    assert handshake(server, "evil.example").startswith(b"HTTP/1.1 403")  # the WebSocket too
    assert handshake(server, "127.0.0.1").startswith(b"HTTP/1.1 101")


def handshake(url: str, host: str) -> bytes:
    """The status line answering a WebSocket handshake to ``/ws`` that names ``host``."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        return s.recv(64)


async def test_a_dropped_connection_ends_its_episode_and_kills_its_command(tmp_path):
    """Issue 44: a client that went away mid-step kept its session and the command running
    in it until the command ended (60 s here); now the episode closes at once."""
    from websockets.asyncio.client import connect

    closed: list[float] = []

    def sessions():
        opener = local_sessions("local")
        close = opener.close

        async def recording_close(session):
            closed.append(time.monotonic())
            await close(session)

        opener.close = recording_close
        return opener

    tick = tmp_path / "tick"
    forever = (
        '<tool name="run_terminal"><command>while true; do echo x >> '
        f"{tick}; sleep 0.1; done</command></tool>"
    )
    app = cheetah_app([bug_task(build_repo(tmp_path / "calc_repo"))], sessions, TOKEN)
    with serving(app) as url:
        ws = await connect(url.replace("http", "ws", 1) + "/ws",
                           additional_headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "calc-add"}}))
        assert json.loads(await ws.recv())["type"] == "observation"
        await ws.send(json.dumps({"type": "step", "data": {"message": forever}}))
        deadline = time.monotonic() + 30
        while not tick.exists():  # the command runs
            assert time.monotonic() < deadline, "the command did not start"
            await asyncio.sleep(0.05)
        ws.transport.abort()  # gone without a close handshake
        dropped = time.monotonic()
        while not closed:
            assert time.monotonic() - dropped < 30, "the episode outlived its connection"
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        size = tick.stat().st_size
        await asyncio.sleep(1.0)
        assert tick.stat().st_size == size, "the command still runs"


@pytest.mark.parametrize("target", ["victim", "missing"])
def test_a_new_token_is_not_written_through_a_planted_link(tmp_path, target, monkeypatch):
    """Issue 44: the server wrote its generated token through a link planted at the token
    path (``exists()`` is False for a link to nothing, so it wrote there)."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    monkeypatch.setenv("CHEETAH_HOME", str(tmp_path))
    (tmp_path / "openenv.token").symlink_to(tmp_path / target)
    with pytest.raises(SettingError, match="is not a regular file"):
        server_token(None)
    assert victim.read_text() == "mine" and not (tmp_path / "missing").exists()
    token = server_token(tmp_path / "new.token")
    assert (tmp_path / "new.token").stat().st_mode & 0o777 == 0o600
    assert server_token(tmp_path / "new.token") == token  # an existing file is read
