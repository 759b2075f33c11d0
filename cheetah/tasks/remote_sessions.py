"""``fleet_sessions``: task sessions on env servers, the production path of evals and RL.

The agent's tool calls, the task's setup command and the grader's checks all run in a
session on an env server (``cheetah env serve``), reached through an ``EnvFleet`` over
many servers, which fails a session over when its server dies. Nothing of the workspace
is on this host. Snapshots travel as the tarballs ``TaskSessionOpener`` registers: the fleet
uploads one to a server the first time a session there needs it, so the servers never
need the task's repo on their own disk. Given no server, one is started here (a child
process) and stopped on exit.

Deliberately left out: evicting tarballs from memory and streaming uploads of very large
repos.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from cheetah.sandbox.fleet import EnvFleet
from cheetah.sandbox.launch import EnvServerProcess
from cheetah.sandbox.protocol import EnvError
from cheetah.tasks.session import TaskSessionOpener


@contextlib.asynccontextmanager
async def fleet_sessions(
    urls: list[str],
    token: str | None = None,
    *,
    workdir: Path | None = None,
    backend: str = "isolated",
    capacity: int = 64,
) -> AsyncIterator[TaskSessionOpener]:
    """``TaskSessionOpener`` over an ``EnvFleet`` of ``urls``; with no URL, over one env server
    started here.

    The local server (``backend`` isolated or local, ``capacity`` sessions) keeps its
    token and log in ``workdir`` (a temp dir when None) and is stopped on exit.
    """
    server = None
    tmp = None
    if not urls:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="cheetah-env-")
            workdir = Path(tmp.name)
        server = EnvServerProcess(workdir, backend=backend, capacity=capacity)
        server.start()  # in this thread: the server's death signal follows its starter
        urls, token = [server.url], server.token
    if not token:
        raise ValueError("env servers need a bearer token (--env-token-file)")
    fleet = EnvFleet(urls, token)
    try:
        await fleet.start()
        sessions = TaskSessionOpener(fleet, f"fleet of {len(urls)} env server(s)")
        with contextlib.suppress(EnvError):
            isolation = (await fleet.stats()).isolation
            sessions.name = f"fleet of {len(urls)} env server(s): {isolation}"
        yield sessions
    finally:
        await fleet.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
        if tmp is not None:
            tmp.cleanup()
