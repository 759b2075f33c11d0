"""`EnvFleet`: one `Environment` over many env servers that survives a server dying.

- Placement: a new session goes to the healthy server with the lowest load
  (sessions / capacity, counted here and refreshed from ``/stats``).
- Backpressure: when every server answers 429, creation waits with backoff (up to
  ``max_wait_s``) instead of failing, so callers slow down rather than error.
- Failover: the fleet keeps each session's snapshot and its log of what changed
  the session: tool-call batches, commands run through ``exec`` and file writes
  (a reset clears the log). When a server stops answering, the session is
  re-created on another server from its snapshot, the log is replayed in order,
  and the interrupted operation is retried. The rollout goes on; nothing is lost.
- Uploads: ``add_snapshot`` takes a tarball made on this machine and names it
  ``upload:SHA256``; before a session with that snapshot is placed on a server
  (first placement or failover), the fleet puts the tarball there if the server
  does not have it yet.
- Retries: an answer of 429/502/503/504 on a session's server is retried with
  backoff (``retries`` times) before it is passed on.
- Health: ``check_health`` (also run every ``health_interval_s`` once ``start``ed)
  marks servers up or down; a transport error marks one down at once.

Deliberately left out: replay of side effects outside the workspace (there are
none: sessions have no network) and exactly-once commands (a replayed batch runs
its commands again, which a deterministic workspace makes harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from cheetah.core.wire import ToolCall, ToolResult
from cheetah.sandbox.client import EnvClient, ServerDown
from cheetah.sandbox.protocol import (
    DiffResponse,
    EnvError,
    ExecRequest,
    ExecResponse,
    FilesResponse,
    SessionInfo,
    Stats,
    WriteFilesRequest,
)

TRANSIENT = frozenset({429, 502, 503, 504})


@dataclass
class _Server:
    url: str
    client: EnvClient
    healthy: bool = True
    sessions: int = 0
    capacity: int = 64

    @property
    def load(self) -> float:
        return self.sessions / max(self.capacity, 1)


LogEntry = tuple[Literal["tools", "exec", "write"], Any]


async def _replay(client: EnvClient, remote_id: str, entry: LogEntry) -> None:
    kind, payload = entry
    if kind == "tools":
        await client.run_tools(remote_id, payload)
    elif kind == "exec":
        await client.exec(remote_id, payload)
    else:
        await client.write_files(remote_id, payload)


@dataclass
class _ReplayableSession:
    id: str
    snapshot: str
    server: _Server
    remote_id: str
    log: list[LogEntry] = field(default_factory=list)
    env: str | None = None  # the session's Python environment (an upload, as the snapshot)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failovers: int = 0


class EnvFleet:
    def __init__(
        self,
        urls: list[str],
        token: str,
        *,
        max_wait_s: float = 300.0,
        backoff_s: float = 0.1,
        health_interval_s: float = 5.0,
        timeout_s: float = 900.0,
        retries: int = 4,
    ) -> None:
        if not urls:
            raise ValueError("EnvFleet needs at least one server URL")
        self.servers = [_Server(u.rstrip("/"), EnvClient(u, token, timeout_s)) for u in urls]
        self.max_wait_s, self.backoff_s = max_wait_s, backoff_s
        self.health_interval_s = health_interval_s
        self.retries = retries
        self.sessions: dict[str, _ReplayableSession] = {}
        self.uploads: dict[str, bytes] = {}
        self._uploaded: set[tuple[str, str]] = set()
        self.failovers = 0
        self._ids = itertools.count(1)
        self._health_task: asyncio.Task | None = None

    # -- fleet management ---------------------------------------------------------
    async def start(self) -> None:
        await self.check_health()

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.health_interval_s)
                await self.check_health()

        self._health_task = asyncio.create_task(loop())

    async def aclose(self) -> None:
        if self._health_task:
            self._health_task.cancel()
        for sid in list(self.sessions):
            with contextlib.suppress(EnvError):
                await self.close(sid)
        for s in self.servers:
            await s.client.aclose()

    async def check_health(self) -> None:
        async def one(server: _Server) -> None:
            try:
                st = await server.client.stats()
            except EnvError:
                server.healthy = False
                return
            server.healthy, server.capacity = True, st.capacity
            server.sessions = max(server.sessions, st.sessions)

        await asyncio.gather(*(one(s) for s in self.servers))

    def _pick(self, exclude: set[str]) -> _Server | None:
        candidates = [s for s in self.servers if s.healthy and s.url not in exclude]
        return min(candidates, key=lambda s: s.load, default=None)

    def add_snapshot(self, tarball: bytes) -> str:
        """Register a snapshot tarball; sessions name it by the string returned."""
        sha = hashlib.sha256(tarball).hexdigest()
        self.uploads[sha] = tarball
        return f"upload:{sha}"

    async def _ensure_snapshot(self, server: _Server, snapshot: str) -> None:
        kind, _, sha = snapshot.partition(":")
        if kind != "upload" or sha not in self.uploads or (server.url, sha) in self._uploaded:
            return
        if not await server.client.has_snapshot(sha):
            await server.client.put_snapshot(sha, self.uploads[sha])
        self._uploaded.add((server.url, sha))

    async def _place(
        self,
        snapshot: str,
        avoid: set[str] | None = None,
        refresh: bool = False,
        env: str | None = None,
    ) -> tuple[_Server, SessionInfo]:
        """Create a session on the least-loaded server; wait while all are full."""
        deadline = time.monotonic() + self.max_wait_s
        delay = self.backoff_s
        reuploaded: set[tuple[str, str]] = set()
        while True:
            full: set[str] = set(avoid or ())
            while (server := self._pick(full)) is not None:
                try:
                    await self._ensure_snapshot(server, snapshot)
                    if env:
                        await self._ensure_snapshot(server, env)
                    info = await server.client.create_session(snapshot, refresh=refresh, env=env)
                    server.sessions += 1
                    return server, info
                except ServerDown:
                    server.healthy = False
                except EnvError as e:
                    keys = {(server.url, s.partition(":")[2]) for s in (snapshot, env) if s}
                    lost = (keys & self._uploaded) - reuploaded
                    if e.status == 404 and lost:
                        # the server lost an upload (a fresh disk behind the same URL): again
                        self._uploaded.difference_update(lost)
                        reuploaded.update(lost)
                        continue
                    if e.status != 429:
                        raise
                    server.sessions = max(server.sessions, server.capacity)
                    full.add(server.url)
            if time.monotonic() > deadline:
                raise EnvError(
                    f"no server could take a session within {self.max_wait_s:g} s "
                    "(all full or down)",
                    429,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            await self.check_health()

    # -- Environment protocol ---------------------------------------------------------
    async def create_session(
        self,
        snapshot: str,
        session_id: str | None = None,
        refresh: bool = False,
        env: str | None = None,
    ) -> SessionInfo:
        server, info = await self._place(snapshot, refresh=refresh, env=env)
        sid = session_id or f"fleet-{next(self._ids)}-{info.session_id}"
        self.sessions[sid] = _ReplayableSession(sid, snapshot, server, info.session_id, env=env)
        return SessionInfo(session_id=sid, snapshot=snapshot, isolation=info.isolation)

    def _get(self, sid: str) -> _ReplayableSession:
        if sid not in self.sessions:
            raise EnvError(f"no session {sid!r} in this fleet", 404)
        return self.sessions[sid]

    async def _failover(self, s: _ReplayableSession) -> None:
        """Re-create ``s`` on another server and replay its log."""
        s.server.healthy = False
        s.server.sessions = max(0, s.server.sessions - 1)
        server, info = await self._place(s.snapshot, avoid={s.server.url}, env=s.env)
        s.server, s.remote_id = server, info.session_id
        for entry in s.log:
            await _replay(server.client, s.remote_id, entry)
        s.failovers += 1
        self.failovers += 1

    async def _on_server(self, s: _ReplayableSession, op):
        """Run ``op(client, remote_id)``: retry a busy server with backoff, fail over a dead one."""
        failovers, busy, delay = 0, 0, self.backoff_s
        while True:
            try:
                return await op(s.server.client, s.remote_id)
            except ServerDown:
                failovers += 1
                if failovers > len(self.servers):
                    raise EnvError(f"session {s.id}: every server failed", 503) from None
                await self._failover(s)
            except EnvError as e:
                busy += 1
                if e.status not in TRANSIENT or busy > self.retries:
                    raise
                await asyncio.sleep(e.retry_after or delay)
                delay = min(delay * 2, 2.0)

    async def run_tools(self, session_id: str, calls: list[ToolCall]) -> list[ToolResult]:
        s = self._get(session_id)
        async with s.lock:
            results = await self._on_server(s, lambda c, rid: c.run_tools(rid, calls))
            s.log.append(("tools", list(calls)))
            return results

    async def diff(self, session_id: str) -> DiffResponse:
        s = self._get(session_id)
        async with s.lock:
            return await self._on_server(s, lambda c, rid: c.diff(rid))

    async def reset(self, session_id: str) -> None:
        s = self._get(session_id)
        async with s.lock:
            await self._on_server(s, lambda c, rid: c.reset(rid))
            s.log.clear()

    async def fork(self, session_id: str) -> SessionInfo:
        s = self._get(session_id)
        async with s.lock:
            info = await self._on_server(s, lambda c, rid: c.fork(rid))
        sid = f"fleet-{next(self._ids)}-{info.session_id}"
        s.server.sessions += 1
        self.sessions[sid] = _ReplayableSession(
            sid, s.snapshot, s.server, info.session_id, log=list(s.log), env=s.env
        )
        return SessionInfo(session_id=sid, snapshot=s.snapshot, isolation=info.isolation)

    async def read_files(self, session_id: str) -> FilesResponse:
        s = self._get(session_id)
        async with s.lock:
            return await self._on_server(s, lambda c, rid: c.read_files(rid))

    async def write_files(self, session_id: str, request: WriteFilesRequest) -> None:
        s = self._get(session_id)
        async with s.lock:
            await self._on_server(s, lambda c, rid: c.write_files(rid, request))
            s.log.append(("write", request))

    async def exec(self, session_id: str, request: ExecRequest) -> ExecResponse:
        s = self._get(session_id)
        async with s.lock:
            result = await self._on_server(s, lambda c, rid: c.exec(rid, request))
            s.log.append(("exec", request))
            return result

    async def stop(self, session_id: str) -> None:
        s = self._get(session_id)
        async with s.lock:
            await self._on_server(s, lambda c, rid: c.stop(rid))

    async def close(self, session_id: str) -> None:
        s = self.sessions.pop(session_id, None)
        if s is None:
            raise EnvError(f"no session {session_id!r} in this fleet", 404)
        s.server.sessions = max(0, s.server.sessions - 1)
        with contextlib.suppress(ServerDown):  # a dead server took the session with it
            await s.server.client.close(s.remote_id)

    async def stats(self) -> Stats:
        """Fleet totals over the healthy servers."""
        parts = []
        for server in self.servers:
            with contextlib.suppress(EnvError):
                parts.append(await server.client.stats())
        if not parts:
            raise EnvError("no server answered", 503)
        return Stats(
            sessions=sum(p.sessions for p in parts),
            capacity=sum(p.capacity for p in parts),
            sessions_created=sum(p.sessions_created for p in parts),
            isolation="; ".join(sorted({p.isolation for p in parts})),
            cpu_count=sum(p.cpu_count for p in parts),
            load_avg_1m=max(p.load_avg_1m for p in parts),
            memory_total_mb=sum(p.memory_total_mb for p in parts),
            memory_available_mb=sum(p.memory_available_mb for p in parts),
            uptime_s=min(p.uptime_s for p in parts),
        )
