"""cheetah's tasks served as an OpenEnv environment (the ``openenv`` extra), driven by
OpenEnv's own client over its WebSocket protocol: a scripted episode graded 1.0, the tiny
model's episode graded, the token, unknown tasks and the connection cap."""

from __future__ import annotations

import asyncio
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

from cheetah.integrations.openenv_server import cheetah_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOKEN = "t" * 32
FIX = (
    '<tool name="edit_file"><path>calc/ops.py</path><old_str>return a - b</old_str>'
    "<new_str>return a + b</new_str></tool>"
)


@pytest.fixture
def server(tmp_path):
    """The app on a free port, in a thread; yields its base URL."""
    task = bug_task(build_repo(tmp_path / "calc_repo"))
    app = cheetah_app([task], lambda: local_sessions("local"), TOKEN, max_episodes=2)
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
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=30)


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
