"""A WebSocket's client going away is seen while the app is busy (issue 44: the OpenEnv
server kept a dropped connection's episode, and the command it ran, until the command ended);
the gate lets only its listed WebSocket paths through, after the Host and token checks."""

from __future__ import annotations

import asyncio

from cheetah.core.http_gate import HttpGate
from cheetah.core.ws_drop import MAX_QUEUED, DropWatch, on_drop

TOKEN = "t" * 32


class Client:
    """The server side of one WebSocket as ASGI sees it: ``receive`` hands out what the test
    queues; ``send`` records, and fails once the client is gone (as a server's send does)."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[dict] = asyncio.Queue()
        self.sent: list[dict] = []
        self.gone = False

    async def receive(self) -> dict:
        message = await self.incoming.get()
        self.gone = message["type"] == "websocket.disconnect"
        return message

    async def send(self, message: dict) -> None:
        if self.gone:
            raise OSError("the client went away")
        self.sent.append(message)


def busy_app(work_started: asyncio.Event, work_over: asyncio.Event, dropped: list[str]):
    """Accepts, reads one message, then works until ``work_over`` (as OpenEnv's handler
    awaits a step, reading nothing); its drop callback ends the work, like a cancel."""

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await receive()  # the step
        on_drop(lambda: (dropped.append("dropped"), work_over.set()))
        work_started.set()
        await work_over.wait()
        await send({"type": "websocket.send", "text": "the step's answer"})

    return app


async def busy_step():
    """A connection through ``DropWatch`` to ``busy_app``, its one step under way: the client,
    the watch's task and the list the app's end is written to."""
    started, over, dropped = asyncio.Event(), asyncio.Event(), []
    client = Client()
    scope = {"type": "websocket", "path": "/ws", "headers": []}
    watch = asyncio.create_task(DropWatch(busy_app(started, over, dropped))(
        scope, client.receive, client.send))  # fmt: skip
    client.incoming.put_nowait({"type": "websocket.connect"})
    client.incoming.put_nowait({"type": "websocket.receive", "text": "step"})
    await asyncio.wait_for(started.wait(), 5)
    return client, watch, dropped


async def test_a_drop_mid_step_is_seen_at_once_and_the_apps_failure_is_dropped():
    client, watch, dropped = await busy_step()
    assert dropped == []
    client.incoming.put_nowait({"type": "websocket.disconnect", "code": 1006})
    await asyncio.wait_for(watch, 5)  # without DropWatch the work would never end
    assert dropped == ["dropped"]


async def test_a_flood_while_the_app_is_busy_counts_as_a_drop():
    client, watch, dropped = await busy_step()
    for _ in range(MAX_QUEUED + 1):
        client.incoming.put_nowait({"type": "websocket.receive", "text": "more"})
    await asyncio.wait_for(watch, 5)
    assert dropped == ["dropped"]


async def test_a_connection_the_app_ends_itself_is_not_a_drop():
    called: list[str] = []

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        on_drop(lambda: called.append("dropped"))
        await send({"type": "websocket.close", "code": 1000})

    client = Client()
    client.incoming.put_nowait({"type": "websocket.connect"})
    scope = {"type": "websocket", "path": "/ws", "headers": []}
    await asyncio.wait_for(DropWatch(app)(scope, client.receive, client.send), 5)
    assert called == [] and client.sent[-1] == {"type": "websocket.close", "code": 1000}


async def test_the_gate_lets_only_listed_websockets_through_after_host_and_token():
    reached: list[str] = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "websocket.accept"})

    gate = HttpGate(app, token=TOKEN, max_body_bytes=1024, allowed_hosts={"127.0.0.1"},
                    websocket_paths=("/ws",))  # fmt: skip
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    cases = {
        "ok": ("/ws", [auth, (b"host", b"127.0.0.1:8010")]),
        "rebound host": ("/ws", [auth, (b"host", b"evil.example:8010")]),
        "no token": ("/ws", [(b"host", b"127.0.0.1:8010")]),
        "unlisted path": ("/mcp", [auth, (b"host", b"127.0.0.1:8010")]),
    }
    answers = {}
    for name, (path, headers) in cases.items():
        client = Client()
        client.incoming.put_nowait({"type": "websocket.connect"})
        await gate({"type": "websocket", "path": path, "headers": headers}, client.receive,
                   client.send)  # fmt: skip
        answers[name] = client.sent
    assert reached == ["/ws"] and answers["ok"] == [{"type": "websocket.accept"}]
    refused = [{"type": "websocket.close", "code": 1008}]
    assert answers["rebound host"] == answers["no token"] == answers["unlisted path"] == refused
