"""The env server over HTTP: auth, capacity (429 + Retry-After), errors, reaping, stats."""

import asyncio
import time

import httpx
import pytest

from cheetah.harness.protocol import parse_message
from cheetah.sandbox.client import EnvClient, ServerDown
from cheetah.sandbox.protocol import EnvError, ExecRequest
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import needs_isolation

pytestmark = needs_isolation


def test_token_required_everywhere_but_health(env_server):
    srv = env_server()
    assert httpx.get(f"{srv.url}/health").json()["ok"] is True
    for method, path in [
        ("GET", "/stats"),
        ("POST", "/sessions"),
        ("POST", "/sessions/x/tools"),
        ("GET", "/sessions/x/diff"),
        ("DELETE", "/sessions/x"),
    ]:
        r = httpx.request(method, f"{srv.url}{path}", json={})
        assert r.status_code == 401, (method, path)
        r = httpx.request(
            method,
            f"{srv.url}{path}",
            json={},
            headers={"Authorization": "Bearer wrong-token-123456"},
        )
        assert r.status_code == 401 and r.json()["detail"] == "missing or wrong bearer token"


async def test_capacity_errors_and_stats(env_server):
    srv = env_server(capacity=1)
    c = EnvClient(srv.url, srv.token)
    try:
        sid = (await c.create_session(str(SAMPLE_REPO))).session_id
        with pytest.raises(EnvError) as e:
            await c.create_session(str(SAMPLE_REPO))
        assert e.value.status == 429 and e.value.retry_after == 1.0
        st = await c.stats()
        assert (st.sessions, st.capacity, st.cpu_count > 0) == (1, 1, True)
        assert "bubblewrap" in st.isolation
        with pytest.raises(EnvError) as e:
            await c.run_tools("nope", [])
        assert e.value.status == 404
        r = httpx.post(
            f"{srv.url}/sessions/{sid}/tools",
            json={"calls": "not a list"},
            headers={"Authorization": f"Bearer {srv.token}"},
        )
        assert r.status_code == 422
        [res] = await c.run_tools(sid, parse_message('<tool name="list_dir"></tool>'))
        assert res.output.startswith("./\ntests/\ntextkit/")
        # the sleep outlasts the limit by far: only the limit can end it, however busy the host
        r = await c.exec(sid, ExecRequest(command="sleep 600", timeout_s=0.5))
        assert r.timed_out and r.exit_code is None
        await c.close(sid)
        assert (await c.stats()).sessions == 0
    finally:
        await c.aclose()


async def test_idle_sessions_are_reaped(env_server):
    # Event-driven: the busy session is used every 0.2 s (plus a call's time: far inside the
    # 4 s idle limit, even on a busy machine) until the reaper has taken the idle one, however
    # long that takes; `stats` touches no session.
    srv = env_server(idle_timeout_s=4.0, reap_interval_s=0.2)
    c = EnvClient(srv.url, srv.token)
    try:
        idle = (await c.create_session(str(SAMPLE_REPO))).session_id
        busy = (await c.create_session(str(SAMPLE_REPO))).session_id
        deadline = time.monotonic() + 120  # a hang guard, not a timing assert
        while (await c.stats()).sessions > 1:
            assert time.monotonic() < deadline, "the idle session was never reaped"
            await c.run_tools(busy, parse_message('<tool name="list_dir"></tool>'))
            await asyncio.sleep(0.2)
        with pytest.raises(EnvError) as e:
            await c.diff(idle)
        assert e.value.status == 404
        assert (await c.diff(busy)).paths == []
        assert (await c.stats()).sessions == 1
    finally:
        await c.aclose()


async def test_dead_server_is_reported_as_down(env_server):
    srv = env_server()
    c = EnvClient(srv.url, srv.token)
    srv.kill()
    with pytest.raises(ServerDown):
        await c.stats()
    await c.aclose()
