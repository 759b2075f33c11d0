"""Where a task's workspace comes from: ``TaskWorkspace``, ``SessionFactory``, a local factory.

The eval runner, ``tasks validate`` and RL rollouts ask a factory for a workspace
holding the task's snapshot, and close it afterwards. Only the snapshot goes in:
hidden files, the test patch and the reference patch stay in the ``Task`` until
the grader runs.

A ``TaskWorkspace`` is what task code needs of a workspace wherever it lives: what
the agent drives (``agent``: a host ``Workspace`` or a ``ToolRunner``), the files
(``read_tree``/``write_files``), commands (``exec``) and ``stop`` (kill what the
agent left running). ``HostTaskWorkspace`` wraps a workspace whose files are on
this host (local copies, in-process isolated sessions); ``cheetah.tasks.remote``
implements it over an env server or fleet, so the grader runs unchanged on both.

``LocalSessionFactory`` is UNSANDBOXED: it copies the snapshot to a temp directory
and runs commands with this user's rights (``LocalWorkspace``). Use it for trusted
task files and models only; the sandboxed factory (cheetah/sandbox) implements the
same protocol. Commands get this interpreter's folder first on PATH, so ``python``
and ``pytest`` in checks and agent commands are the ones cheetah runs with, and
``PYTHONDONTWRITEBYTECODE=1`` so bytecode does not clutter the diff.

Deliberately left out: reusing workspaces between tasks, resource limits (the
sandbox backends own both).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

from cheetah.core.safefs import SafeRoot, read_tree, split
from cheetah.core.workspace import (
    ExecResult,
    LocalWorkspace,
    PathError,
    Workspace,
    resolve_path,
    run_process,
)
from cheetah.harness.loop import ToolRunner
from cheetah.tasks.schema import Task
from cheetah.tasks.snapshot import materialize

SETUP_TIMEOUT_S = 600.0


class TaskSetupError(RuntimeError):
    """The workspace for a task could not be made ready (snapshot or setup command failed)."""


@runtime_checkable
class TaskWorkspace(Protocol):
    """A task's workspace as task code sees it (see the module docstring)."""

    @property
    def agent(self) -> Workspace | ToolRunner: ...

    async def read_tree(self) -> dict[str, bytes]: ...

    async def write_files(self, changes: dict[str, bytes | None]) -> None: ...

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult: ...

    async def stop(self) -> None: ...


@runtime_checkable
class SessionFactory(Protocol):
    """Creates a workspace holding a task's snapshot, and disposes of it."""

    name: str

    async def create(self, task: Task) -> TaskWorkspace: ...

    async def close(self, workspace: TaskWorkspace) -> None: ...


class HostTaskWorkspace:
    """A ``TaskWorkspace`` over a ``Workspace`` whose files lie under ``root`` on this host."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    @property
    def agent(self) -> Workspace:
        return self.workspace

    @property
    def root(self) -> Path:
        return self.workspace.root

    async def read_tree(self) -> dict[str, bytes]:
        return await asyncio.to_thread(read_tree, self.root)

    async def write_files(self, changes: dict[str, bytes | None]) -> None:
        for rel in changes:
            split(rel)  # PathError: refused before anything is written
        files = SafeRoot(self.root)

        def apply() -> None:
            for rel in changes:
                if files.kind(rel) == "dir":
                    raise PathError(f"{rel!r} is a directory")
            for rel, data in changes.items():
                if data is None:
                    files.unlink(rel)
                else:
                    files.write(rel, data)

        await asyncio.to_thread(apply)

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        return await self.workspace.exec(
            command, timeout_s=timeout_s, cwd=cwd, output_limit=output_limit
        )

    async def stop(self) -> None:
        kill = getattr(self.workspace, "kill_processes", None)
        if kill is not None:
            await asyncio.to_thread(kill)


def tool_env() -> dict[str, str]:
    """The environment for commands in a local task workspace."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


class TrustedLocalWorkspace(LocalWorkspace):
    """``LocalWorkspace`` with this interpreter first on PATH. No isolation: trusted use only."""

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        workdir = resolve_path(self.root, cwd, must_exist=True)
        return await run_process(
            ["bash", "-c", command],
            cwd=workdir,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env=tool_env(),
        )


class LocalSessionFactory:
    """UNSANDBOXED: snapshot copied to a temp dir, commands run as this user. Trusted tasks only."""

    name = "local-unsandboxed"

    def __init__(self, base_dir: str | Path | None = None, keep: bool = False) -> None:
        self.base_dir = Path(base_dir) if base_dir else None
        self.keep = keep

    async def create(self, task: Task) -> HostTaskWorkspace:
        if self.base_dir:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="cheetah-task-", dir=self.base_dir))
        root = tmp / "repo"
        try:
            await asyncio.to_thread(materialize, task.snapshot, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return HostTaskWorkspace(TrustedLocalWorkspace(root))

    async def close(self, workspace: TaskWorkspace) -> None:
        assert isinstance(workspace, HostTaskWorkspace)
        if not self.keep:
            await asyncio.to_thread(shutil.rmtree, workspace.root.parent, True)


async def open_task(
    factory: SessionFactory, task: Task, *, setup_timeout_s: float = SETUP_TIMEOUT_S
) -> TaskWorkspace:
    """A ready workspace: the snapshot, then the task's setup command (which must exit 0)."""
    try:
        ws = await factory.create(task)
    except Exception as e:
        raise TaskSetupError(f"snapshot: {e}") from e
    if task.setup:
        result = await ws.exec(task.setup, timeout_s=setup_timeout_s, output_limit=8_000)
        if result.exit_code != 0:
            await factory.close(ws)
            why = (
                f"timed out after {setup_timeout_s:g} s"
                if result.timed_out
                else f"exit status {result.exit_code}"
            )
            tail = result.output.strip()[-2000:]
            raise TaskSetupError(f"setup command {task.setup!r} failed ({why}):\n{tail}")
    return ws
