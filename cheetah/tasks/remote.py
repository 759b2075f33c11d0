"""Task workspaces on env servers: ``FleetSessionFactory`` and ``RemoteTaskWorkspace``.

This is the production path for evals and RL rollouts: the agent's tool calls,
the task's setup command and the grader's checks all run in a session on an env
server (``cheetah env serve``), reached through an ``Environment`` (normally an
``EnvFleet`` over many servers, which fails a session over when its server dies).
Nothing of the workspace is on this host; the grader reads and writes it through
``read_files``/``write_files``.

The task's snapshot is materialized here once per distinct snapshot, packed into a
deterministic gzip tarball (sorted names, zero mtimes and owners, so every process
packs the same bytes) and registered with the fleet, which uploads it to a server
the first time a session there needs it. The servers never need the task's repo
on their own disk.

Deliberately left out: evicting tarballs from memory (a task file names a handful
of snapshots) and streaming uploads of very large repos.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from cheetah.core.workspace import ExecResult, PathError
from cheetah.harness.loop import ToolRunner
from cheetah.sandbox.env import EnvSession
from cheetah.sandbox.fleet import EnvFleet
from cheetah.sandbox.launch import LocalEnvServer
from cheetah.sandbox.protocol import EnvError, ExecRequest, WriteFilesRequest
from cheetah.tasks.schema import Task
from cheetah.tasks.snapshot import materialize


def pack_tree(root: Path) -> bytes:
    """A deterministic ``.tar.gz`` of ``root``'s files, directories and symlinks."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isreg():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            elif info.isdir() or info.issym():
                tar.addfile(info)
    return buf.getvalue()


def pack_task_snapshot(task: Task) -> bytes:
    with tempfile.TemporaryDirectory(prefix="cheetah-pack-") as tmp:
        root = materialize(task.snapshot, Path(tmp) / "repo")
        return pack_tree(root)


class RemoteTaskWorkspace:
    """A ``TaskWorkspace`` that is a session of an ``Environment`` (server or fleet)."""

    def __init__(self, env: Any, session_id: str) -> None:
        self.env, self.id = env, session_id
        self._runner = EnvSession(env, session_id)

    @property
    def agent(self) -> ToolRunner:
        return self._runner

    async def read_tree(self) -> dict[str, bytes]:
        return (await self.env.read_files(self.id)).tree()

    async def write_files(self, changes: dict[str, bytes | None]) -> None:
        try:
            await self.env.write_files(self.id, WriteFilesRequest.of(changes))
        except EnvError as e:
            if e.status == 400:
                raise PathError(str(e)) from None
            raise

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        req = ExecRequest(command=command, timeout_s=timeout_s, cwd=cwd, output_limit=output_limit)
        r = await self.env.exec(self.id, req)
        return ExecResult(**r.model_dump())

    async def stop(self) -> None:
        await self.env.stop(self.id)


class FleetSessionFactory:
    """Task workspaces as sessions of ``env`` (an ``EnvFleet``; see the module docstring)."""

    name = "fleet"

    def __init__(self, env: Any) -> None:
        self.env = env
        self._snapshots: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def _snapshot(self, task: Task) -> str:
        key = hashlib.sha256(task.snapshot.model_dump_json().encode()).hexdigest()
        async with self._lock:
            if key not in self._snapshots:
                tarball = await asyncio.to_thread(pack_task_snapshot, task)
                self._snapshots[key] = self.env.add_snapshot(tarball)
            return self._snapshots[key]

    async def create(self, task: Task) -> RemoteTaskWorkspace:
        snapshot = await self._snapshot(task)
        info = await self.env.create_session(snapshot)
        return RemoteTaskWorkspace(self.env, info.session_id)

    async def close(self, workspace: Any) -> None:
        await self.env.close(workspace.id)


@contextlib.asynccontextmanager
async def fleet_factory(
    urls: list[str],
    token: str | None = None,
    *,
    workdir: Path | None = None,
    backend: str = "isolated",
    capacity: int = 64,
) -> AsyncIterator[FleetSessionFactory]:
    """A ``FleetSessionFactory`` over ``urls``; with no URL, over one env server started here.

    The local server (``backend`` isolated or local, ``capacity`` sessions) keeps its
    token and log in ``workdir`` (a temp dir when None) and is stopped on exit.
    """
    server = None
    tmp = None
    if not urls:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="cheetah-env-")
            workdir = Path(tmp.name)
        server = LocalEnvServer(workdir, backend=backend, capacity=capacity)
        server.start()  # in this thread: the server's death signal follows its starter
        urls, token = [server.url], server.token
    if not token:
        raise ValueError("env servers need a bearer token (--env-token-file)")
    fleet = EnvFleet(urls, token)
    try:
        await fleet.start()
        factory = FleetSessionFactory(fleet)
        with contextlib.suppress(EnvError):
            isolation = (await fleet.stats()).isolation
            factory.name = f"fleet of {len(urls)} env server(s): {isolation}"
        yield factory
    finally:
        await fleet.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
        if tmp is not None:
            tmp.cleanup()
