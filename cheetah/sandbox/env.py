"""`LocalEnv`: the environment in process. The env server wraps one; tests and a single
machine use it directly.

Each session pairs a backend session (isolated or trusted copy) with its own
``ToolContext``, so the todo list and other per-session state live with the files.
Sessions idle longer than ``idle_timeout_s`` are reaped by ``reap_idle``; at
``capacity`` new sessions are refused with status 429 and a retry hint.

Snapshots a client has on its own disk reach a remote server as uploads: a
tarball is put once under its sha256 (``put_upload``, checked against the hash)
and sessions name it ``upload:SHA256``; the snapshot store unpacks it once, then drops
the tarball and keeps the unpacked copy within its budget (``sandbox/store.py``).

With ``snapshot_roots`` (what the env server is given, ``--snapshot-root``), a session
starts only from an upload or from a path that resolves inside one of those roots: a
client never names a host path for the server to copy. ``None`` (in-process use, where
the caller is trusted with its own paths) allows any path. Every request is bounded by
``ServerLimits`` (tool calls per batch here; bodies, uploads and tarballs elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import time
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cheetah.core.safefs import SafeRoot, read_tree, split
from cheetah.core.wire import ToolCall, ToolResult
from cheetah.core.workspace import PathError, TreeTooLarge
from cheetah.limits import ServerLimits
from cheetah.sandbox.config import SandboxConfig
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
from cheetah.sandbox.reclaim import InvalidSessionId, SessionIdTaken, check_session_id
from cheetah.sandbox.snapshot import SnapshotError, SnapshotSpec
from cheetah.tools import default_tools
from cheetah.tools.base import CodeSearch, Limits, ToolContext
from cheetah.tools.batch import run_batch

MAX_TREE_BYTES = 64 << 20  # what read_files returns at most

Backend = Literal["isolated", "local"]


@dataclass
class _OpenSession:
    info: SessionInfo
    backend_session: Any
    ctx: ToolContext
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class LocalEnv:
    def __init__(
        self,
        backend: Backend = "isolated",
        *,
        config: SandboxConfig | None = None,
        capacity: int = 64,
        idle_timeout_s: float = 1800.0,
        limits: Limits | None = None,
        code_search: CodeSearch | None = None,
        server_limits: ServerLimits | None = None,
        snapshot_roots: Sequence[str | Path] | None = None,
    ) -> None:
        self.server_limits = server_limits or ServerLimits.load()
        if backend == "isolated":
            from cheetah.sandbox.isolated import Sandbox

            self.backend: Any = Sandbox(config, limits=self.server_limits)
        elif backend == "local":
            from cheetah.sandbox.copy_backend import CopyBackend

            self.backend = CopyBackend(config.base_dir if config else None, self.server_limits)
        else:
            raise ValueError(f"unknown backend {backend!r}; choose 'isolated' or 'local'")
        self.store = self.backend.snapshots
        self.snapshot_roots = (
            None if snapshot_roots is None else [Path(r).resolve() for r in snapshot_roots]
        )
        self.capacity, self.idle_timeout_s = capacity, idle_timeout_s
        self.limits = limits or Limits()
        self.code_search = code_search  # backs codebase_search in every session (None: off)
        self.tools = default_tools()
        remove_stale_parts(self.store.uploads)
        self.sessions: dict[str, _OpenSession] = {}
        self.started = time.monotonic()
        self.created = 0
        self._pending = 0

    @property
    def isolation(self) -> str:
        return self.backend.describe()

    def _get(self, session_id: str) -> _OpenSession:
        try:
            check_session_id(session_id)
        except InvalidSessionId as e:
            raise EnvError(str(e), 400) from None
        s = self.sessions.get(session_id)
        if s is None:
            raise EnvError(f"no session {session_id!r} (closed, reaped, or never created)", 404)
        s.last_used = time.monotonic()
        return s

    def _check_capacity(self) -> None:
        if len(self.sessions) + self._pending >= self.capacity:
            raise EnvError(f"at capacity ({self.capacity} sessions)", 429, retry_after=1.0)

    async def create_session(
        self,
        snapshot: str,
        session_id: str | None = None,
        refresh: bool = False,
        env: str | None = None,
    ) -> SessionInfo:
        """A new session; a client-given ``session_id`` must be an opaque token (400 if not,
        see ``reclaim.check_session_id``) and new on this server and its base dir (409).
        ``env`` names a Python environment as a snapshot is named (same rules and roots);
        commands run with it read-only at ``/env``, its ``bin`` first on ``PATH``."""
        try:
            if session_id is not None:
                check_session_id(session_id)
        except InvalidSessionId as e:
            raise EnvError(str(e), 400) from None
        self._check_capacity()
        if session_id is not None and session_id in self.sessions:
            raise EnvError(f"session {session_id!r} already exists", 409)
        try:
            spec = SnapshotSpec.parse(snapshot)
            env_spec = SnapshotSpec.parse(env) if env else None
        except (SnapshotError, ValueError) as e:
            raise EnvError(str(e), 400) from None
        spec = self._check_root(spec)
        env_spec = self._check_root(env_spec) if env_spec else None
        self._pending += 1
        try:
            bs = await self.backend.create(spec, session_id, refresh, env=env_spec)
        except SnapshotError as e:
            raise EnvError(str(e), 400) from None
        except SessionIdTaken as e:  # another server on the same base dir has it
            raise EnvError(str(e), 409) from None
        finally:
            self._pending -= 1
        return self._register(bs, snapshot)

    def _check_root(self, spec: SnapshotSpec) -> SnapshotSpec:
        """``spec`` with its path resolved (links followed), 403 unless that lies inside a
        root; an upload, or any spec when there are no roots (in process), as it is."""
        if self.snapshot_roots is None or spec.kind == "upload":
            return spec
        where = Path(spec.path).expanduser().resolve()
        if not any(where.is_relative_to(root) for root in self.snapshot_roots):
            raise EnvError(
                f"snapshot {spec.kind}:{spec.path} is not under a snapshot root of this server "
                "(cheetah env serve --snapshot-root DIR); upload it instead: "
                "PUT /snapshots/SHA256, then create the session from upload:SHA256",
                403,
            )
        return spec.model_copy(update={"path": str(where)})

    # -- snapshot uploads ---------------------------------------------------------------
    def _upload_sha(self, sha: str) -> str:
        try:
            return SnapshotSpec.parse(f"upload:{sha}").path
        except SnapshotError as e:
            raise EnvError(str(e), 400) from None

    def has_upload(self, sha: str) -> bool:
        return self.store.has_upload(self._upload_sha(sha))

    def add_snapshot(self, tarball: bytes) -> str:
        """Keep a snapshot tarball (as an upload) and return the name sessions use for it,
        as ``EnvFleet.add_snapshot`` does, so task code registers snapshots alike on both."""
        sha = hashlib.sha256(tarball).hexdigest()
        if not self.has_upload(sha):
            self.put_upload(sha, tarball)
        return f"upload:{sha}"

    def put_upload(self, sha: str, data: bytes) -> None:
        """Keep a snapshot tarball under its sha256 (refused when the bytes do not match)."""
        cap = self.server_limits.env_max_upload_bytes
        if len(data) > cap:
            raise EnvError(
                f"snapshot of {len(data)} bytes is over {cap} (env_max_upload_bytes)", 413
            )
        with self.store.writer(self._upload_sha(sha), cap) as upload:
            upload.write(data)
            upload.commit()
        self.store.add_upload(sha)

    async def put_upload_stream(self, sha: str, chunks: AsyncIterable[bytes]) -> None:
        """``put_upload`` for a body that arrives in pieces (the server's PUT): streamed to
        a temporary file while hashed and counted, never held whole in memory."""
        sha = self._upload_sha(sha)  # a bad id is refused before the body is read
        cap = self.server_limits.env_max_upload_bytes
        upload = await asyncio.to_thread(self.store.writer, sha, cap)
        try:
            pending = bytearray()
            async for chunk in chunks:
                pending += chunk
                if len(pending) >= 1 << 20:
                    await asyncio.to_thread(upload.write, bytes(pending))
                    pending.clear()
            await asyncio.to_thread(upload.write, bytes(pending))
            await asyncio.to_thread(upload.commit)
        finally:
            upload.discard()
        await asyncio.to_thread(self.store.add_upload, sha)

    def _register(self, bs: Any, snapshot: str) -> SessionInfo:
        info = SessionInfo(session_id=bs.id, snapshot=snapshot, isolation=self.isolation)
        self.created += 1
        self.sessions[bs.id] = _OpenSession(
            info, bs, ToolContext(workspace=bs, limits=self.limits, code_search=self.code_search)
        )
        return info

    async def run_tools(self, session_id: str, calls: list[ToolCall]) -> list[ToolResult]:
        cap = self.server_limits.env_max_calls
        if len(calls) > cap:
            raise EnvError(
                f"a batch of {len(calls)} tool calls is over the limit of {cap} (env_max_calls)",
                413,
            )
        s = self._get(session_id)
        async with s.lock:  # one batch at a time per session; calls inside run concurrently
            results = await run_batch(calls, s.ctx, self.tools)
        s.last_used = time.monotonic()
        return results

    async def diff(self, session_id: str) -> DiffResponse:
        bs = self._get(session_id).backend_session
        truncated: list[str] = []
        paths = await asyncio.to_thread(bs.changed_paths, truncated)
        text = await asyncio.to_thread(bs.diff, paths)
        return DiffResponse(paths=paths, diff=text, truncated=truncated)

    async def reset(self, session_id: str) -> None:
        s = self._get(session_id)
        async with s.lock:
            await asyncio.to_thread(s.backend_session.reset)
            s.ctx.todos = []

    async def fork(self, session_id: str) -> SessionInfo:
        self._check_capacity()
        s = self._get(session_id)
        async with s.lock:
            child = await asyncio.to_thread(s.backend_session.fork)
        info = self._register(child, s.info.snapshot)
        self.sessions[child.id].ctx.todos = list(s.ctx.todos)
        return info

    async def read_files(self, session_id: str) -> FilesResponse:
        s = self._get(session_id)
        truncated: list[str] = []
        async with s.lock:
            try:
                tree = await asyncio.to_thread(
                    read_tree, s.backend_session.root, MAX_TREE_BYTES, truncated
                )
            except TreeTooLarge as e:
                raise EnvError(str(e), 413) from None
            except PathError as e:
                raise EnvError(str(e), 400) from None
        return FilesResponse.of(tree, truncated)

    async def write_files(self, session_id: str, request: WriteFilesRequest) -> None:
        """Write or delete files. Every path is checked (as a path, and against what is there
        now, under the session lock) before anything is written; the writes themselves go by
        descriptor, so a path the session swaps meanwhile fails instead of leading elsewhere."""
        s = self._get(session_id)
        try:
            changes = request.changes()
            for rel in changes:
                split(rel)
        except (PathError, ValueError) as e:
            raise EnvError(f"{e}", 400) from None
        files = SafeRoot(s.backend_session.root)

        def apply() -> None:
            for rel, data in changes.items():
                kind = files.kind(rel)
                if kind not in (None, "file") and not (data is None and kind in ("link", "other")):
                    raise PathError(f"file {rel!r} is a {'directory' if kind == 'dir' else kind}")
            for rel, data in changes.items():
                if data is None:
                    files.unlink(rel)
                else:
                    files.write(rel, data)

        async with s.lock:
            try:
                await asyncio.to_thread(apply)
            except PathError as e:
                raise EnvError(str(e), 400) from None

    async def exec(self, session_id: str, request: ExecRequest) -> ExecResponse:
        s = self._get(session_id)
        async with s.lock:
            try:
                r = await s.backend_session.exec(
                    request.command,
                    timeout_s=request.timeout_s,
                    cwd=request.cwd,
                    output_limit=request.output_limit,
                )
            except PathError as e:
                raise EnvError(f"cwd {request.cwd!r}: {e}", 400) from None
        s.last_used = time.monotonic()
        return ExecResponse(**dataclasses.asdict(r))

    async def stop(self, session_id: str) -> None:
        """Kill every process of the session (what the agent left running), commands that
        are still starting included (``IsolatedSession.kill_processes``)."""
        s = self._get(session_id)
        await asyncio.to_thread(s.backend_session.kill_processes)

    async def close(self, session_id: str) -> None:
        s = self.sessions.pop(session_id, None)
        if s is None:
            raise EnvError(f"no session {session_id!r}", 404)
        # Kill first, outside the lock: a batch still running ends at once instead of
        # holding the close until its commands time out.
        await asyncio.to_thread(s.backend_session.kill_processes)
        async with s.lock:
            await asyncio.to_thread(s.backend_session.close)

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            with contextlib.suppress(EnvError):
                await self.close(sid)

    def kill_all(self) -> int:
        """Kill every running command of every session (the sessions stay); how many."""
        return sum(s.backend_session.kill_processes() for s in list(self.sessions.values()))

    async def aclose(self) -> None:
        """Close every session, then what the backend holds on the host (runtime mounts)."""
        await self.close_all()
        await asyncio.to_thread(self.backend.close)

    async def reap_idle(self) -> list[str]:
        now = time.monotonic()
        idle = [
            sid
            for sid, s in self.sessions.items()
            if now - s.last_used > self.idle_timeout_s and not s.lock.locked()
        ]
        for sid in idle:
            with contextlib.suppress(EnvError):
                await self.close(sid)
        return idle

    async def stats(self) -> Stats:
        total, avail = _meminfo()
        return Stats(
            sessions=len(self.sessions),
            capacity=self.capacity,
            sessions_created=self.created,
            isolation=self.isolation,
            cpu_count=os.cpu_count() or 1,
            load_avg_1m=os.getloadavg()[0],
            memory_total_mb=total,
            memory_available_mb=avail,
            uptime_s=time.monotonic() - self.started,
        )


def remove_stale_parts(uploads: Path, max_age_s: float = 3600.0) -> list[Path]:
    """Partial uploads (``.*.part``) untouched for ``max_age_s``: what a server killed in the
    middle of an upload left. A live upload writes its file all the time, so the age tells
    them apart even when several servers share the directory."""
    removed = []
    now = time.time()
    for part in uploads.glob(".*.part") if uploads.is_dir() else []:
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime > max_age_s:
                part.unlink()
                removed.append(part)
    return removed


def _meminfo() -> tuple[float, float]:
    values = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                values[key] = float(rest.split()[0]) / 1024
    except OSError:
        return 0.0, 0.0
    return values.get("MemTotal", 0.0), values.get("MemAvailable", 0.0)


class SessionTools:
    """A session seen as a ``ToolRunner``: ``run_agent`` drives any ``Environment`` through it."""

    def __init__(self, env: Any, session_id: str) -> None:
        self.env, self.session_id = env, session_id

    def specs(self):
        return [t.spec for t in default_tools().values()]

    async def run_tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        return await self.env.run_tools(self.session_id, calls)
