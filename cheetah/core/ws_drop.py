"""`DropWatch`: an ASGI middleware that sees a WebSocket's client go away while the app is busy.

An ASGI app learns that its client left only when it calls ``receive``. A handler that awaits
long work between two messages (OpenEnv's, awaiting a step) learns it when the work ends, so
what the connection holds (an episode, its sandbox session, the command running there) lives
on until then. ``DropWatch`` reads each message of a WebSocket as it arrives and queues it
for the app (the queue is the app's ``receive``); on ``websocket.disconnect`` it calls, at
once and on the app's loop, what the connection registered with ``on_drop``. After a drop,
an exception from the app (its answer to the gone client failing) is expected and dropped.

A client may send at most ``MAX_QUEUED`` messages ahead of the app: one more counts as a
drop (the app then reads a disconnect), so a flood sent while the app is busy is not held
in memory. HTTP requests and lifespan pass through untouched.

Left out: HTTP requests (their handlers are short, or bounded by the server's limits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

MAX_QUEUED = 16
_CALLBACKS: ContextVar[list[Callable[[], None]] | None] = ContextVar("ws_drop", default=None)


def on_drop(callback: Callable[[], None]) -> bool:
    """Call ``callback`` (no arguments, on the app's loop) when the client of the WebSocket
    being handled goes away; False (and nothing registered) outside a ``DropWatch`` one."""
    callbacks = _CALLBACKS.get()
    if callbacks is not None:
        callbacks.append(callback)
    return callbacks is not None


class DropWatch:
    """Wraps an ASGI app; see the module docstring."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        callbacks: list[Callable[[], None]] = []
        inbox: asyncio.Queue[dict] = asyncio.Queue()
        reset = _CALLBACKS.set(callbacks)  # the app's task copies this context
        app = asyncio.ensure_future(self.app(scope, inbox.get, send))
        _CALLBACKS.reset(reset)
        dropped = False
        try:
            while not dropped:
                incoming = asyncio.ensure_future(receive())
                try:
                    await asyncio.wait({app, incoming}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not incoming.done():  # the app ended the connection, or we are stopped
                        incoming.cancel()
                if not incoming.done() or incoming.cancelled():
                    break
                message = incoming.result()
                if inbox.qsize() >= MAX_QUEUED:
                    message = {"type": "websocket.disconnect", "code": 1008}
                inbox.put_nowait(message)
                dropped = message["type"] == "websocket.disconnect"
        except BaseException:  # stopped (or receive failed): the app goes too
            app.cancel()
            raise
        if dropped:
            for callback in callbacks:
                callback()
        try:
            await app
        except Exception:
            if not dropped:
                raise
