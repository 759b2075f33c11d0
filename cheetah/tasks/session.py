"""Task sessions: a task's workspace is a session of an ``Environment``, the one session
protocol (``sandbox/protocol.py``) with its two implementations, ``LocalEnv`` in this
process and the env server over HTTP (``EnvClient``, and ``EnvFleet`` over many).

Eval, RL rollouts, SFT demonstrations and ``tasks validate`` open every task the same
way, through ``TaskSessionOpener(env)``:

- ``local_sessions("isolated")``: ``LocalEnv`` with the bubblewrap + overlay backend;
- ``local_sessions("local")``: ``LocalEnv`` with the trusted copy backend, UNSANDBOXED
  (commands run with this user's rights: trusted task files and models only);
- ``tasks.fleet.fleet_sessions(urls)``: an ``EnvFleet`` over env servers (one started
  here when given none), the production path.

The task's snapshot (directory, tarball or git commit, plus its patch) is materialized
here once per distinct snapshot, packed into a deterministic tarball and registered with
the environment (``add_snapshot``), which keeps it read-only and forks every session
from it. A task's ``env`` (a per-repo Python environment, ``tasks/envs.py``) is registered
the same way and named in the session's create, so its commands run with it. Only the snapshot goes in: hidden files, the test patch and the reference
patch stay in the ``Task`` until the grader writes them (``TaskSession.write_files``).

A ``TaskSession`` is what task code needs of a session: the agent's tool runner
(``agent``), the files (``read_tree``/``write_files``), commands (``exec``) and ``stop``
(kill what the agent left running). Deliberately left out: reusing sessions between
tasks, evicting registered snapshots (a task file names a few hundred at most).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any, Literal

from cheetah.core.workspace import ExecResult, PathError
from cheetah.sandbox.env import LocalEnv, SessionTools
from cheetah.sandbox.protocol import EnvError, ExecRequest, WriteFilesRequest
from cheetah.tasks.checkout import pack_snapshot, pack_tree
from cheetah.tasks.fetched import fetched_env
from cheetah.tasks.schema import Task
from cheetah.tools.base import CodeSearch

SETUP_TIMEOUT_S = 600.0


def pack_env(path: Path) -> bytes:
    """The task's Python environment (a venv made with ``--copies``) as a snapshot tarball."""
    if not (path / "pyvenv.cfg").is_file() or not (path / "bin" / "python").exists():
        raise TaskSetupError(f"env {path} is not a Python environment (no pyvenv.cfg, bin/python)")
    return pack_tree(path)


class TaskSetupError(RuntimeError):
    """The workspace for a task could not be made ready (snapshot or setup command failed)."""


class TaskSession:
    """One task's session of ``env`` (see the module docstring)."""

    def __init__(self, env: Any, session_id: str) -> None:
        self.env, self.id = env, session_id
        self.agent = SessionTools(env, session_id)  # the harness's ToolRunner
        self.closed = False

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


class TaskSessionOpener:
    """Opens and closes task sessions on ``env`` (``LocalEnv`` or ``EnvFleet``: anything
    with the session protocol and ``add_snapshot``)."""

    def __init__(self, env: Any, name: str | None = None) -> None:
        self.env = env
        self.name = name or getattr(env, "isolation", type(env).__name__)
        self._snapshots: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self.runners: dict[str, Any] = {}  # the grader's pytest runner per snapshot and env

    async def _snapshot(self, task: Task) -> str:
        key = hashlib.sha256(task.snapshot.model_dump_json().encode()).hexdigest()
        async with self._lock:
            if key not in self._snapshots:
                tarball = await asyncio.to_thread(pack_snapshot, task.snapshot)
                self._snapshots[key] = await asyncio.to_thread(self.env.add_snapshot, tarball)
            return self._snapshots[key]

    async def _env(self, task: Task) -> str | None:
        """The task's env, or the one ``tasks fetch`` built for its package, registered."""
        env = task.env
        if env is None and task.snapshot.package:
            found = fetched_env(task.snapshot.package)
            env = str(found) if found else None
        if env is None:
            return None
        key = f"env:{env}"
        async with self._lock:
            if key not in self._snapshots:
                tarball = await asyncio.to_thread(pack_env, Path(env))
                self._snapshots[key] = await asyncio.to_thread(self.env.add_snapshot, tarball)
            return self._snapshots[key]

    async def create(self, task: Task) -> TaskSession:
        snapshot = await self._snapshot(task)
        env = await self._env(task)
        if env is None:  # environments that predate ``env`` keep working
            info = await self.env.create_session(snapshot)
        else:
            info = await self.env.create_session(snapshot, env=env)
        return TaskSession(self.env, info.session_id)

    async def close(self, session: TaskSession) -> None:
        """Close ``session``; closing it again does nothing (the grader closes the agent's
        session as soon as it has its files, and the caller's ``finally`` still may)."""
        if session.closed:
            return
        session.closed = True
        await self.env.close(session.id)


def local_sessions(
    backend: Literal["isolated", "local"],
    *,
    code_search: CodeSearch | None = None,
    capacity: int = 1024,
    **env_args: Any,
) -> TaskSessionOpener:
    """Task sessions in this process (``backend``: see the module docstring)."""
    if backend not in ("isolated", "local"):
        raise ValueError(f"unknown sandbox kind {backend!r}; choose 'isolated' or 'local'")
    env = LocalEnv(backend, capacity=capacity, code_search=code_search, **env_args)
    name = "local-unsandboxed" if backend == "local" else "isolated"
    return TaskSessionOpener(env, name)


async def open_task(
    sessions: TaskSessionOpener, task: Task, *, setup_timeout_s: float = SETUP_TIMEOUT_S
) -> TaskSession:
    """A ready session: the snapshot, then the task's setup command (which must exit 0)."""
    try:
        ws = await sessions.create(task)
    except Exception as e:
        raise TaskSetupError(f"snapshot: {e}") from e
    if task.setup:
        result = await ws.exec(task.setup, timeout_s=setup_timeout_s, output_limit=8_000)
        if result.exit_code != 0:
            await sessions.close(ws)
            why = (
                f"timed out after {setup_timeout_s:g} s"
                if result.timed_out
                else f"exit status {result.exit_code}"
            )
            tail = result.output.strip()[-2000:]
            raise TaskSetupError(f"setup command {task.setup!r} failed ({why}):\n{tail}")
    return ws
