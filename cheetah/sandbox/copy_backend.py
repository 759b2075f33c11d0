"""The trusted backend: a session is a plain copy of the snapshot, commands run unsandboxed.

For trusted local use only (your own code, tests of this package). It exists so that
the session operations (create, diff, reset, fork, close) work where bubblewrap
does not, and it must be chosen explicitly: ``LocalEnv(backend="local")``. Commands see
this interpreter first on ``PATH``, as in the isolated sandbox (``interpreter_env``), or the
session's Python environment (its ``bin``, where the store keeps it) when it has one.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
import weakref
from pathlib import Path

from cheetah.core.safefs import SafeRoot
from cheetah.core.workspace import ExecResult, LocalWorkspace, interpreter_env
from cheetah.limits import ServerLimits
from cheetah.sandbox.diff import changed, tree_files
from cheetah.sandbox.diff import diff as diff_text
from cheetah.sandbox.snapshot import SnapshotSpec
from cheetah.sandbox.store import SnapshotStore
from cheetah.sandbox.trees import copy_tree, remove_tree

DESCRIPTION = "none (trusted local backend: commands run unsandboxed as the server's user)"


class CopyBackend:
    def __init__(self, base_dir: Path | None = None, limits: ServerLimits | None = None) -> None:
        self.base = Path(base_dir or tempfile.mkdtemp(prefix="cheetah-local-"))
        if base_dir is None:  # its own temp dir: gone with the backend
            weakref.finalize(self, remove_tree, self.base)
        self.snapshots = SnapshotStore(self.base, limits=limits)
        self.sessions_dir = self.base / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return DESCRIPTION

    async def create(
        self,
        spec: SnapshotSpec,
        session_id: str | None = None,
        refresh: bool = False,
        env: SnapshotSpec | None = None,
    ) -> CopySession:
        env_dir = await asyncio.to_thread(self.snapshots.acquire, env) if env else None
        held = [*([env_dir] if env_dir else [])]
        try:
            lower = await asyncio.to_thread(self.snapshots.acquire, spec, refresh)
            held.append(lower)
            session = CopySession(self, lower, session_id or uuid.uuid4().hex[:12], env_dir)
            await asyncio.to_thread(copy_tree, lower, session.dir)
        except BaseException:
            for path in held:
                self.snapshots.release(path)
            raise
        return session

    def close(self) -> None:
        """Nothing of the host to give back (no mounts); sessions close on their own."""


class CopySession:
    def __init__(
        self, backend: CopyBackend, lower: Path, session_id: str, env_dir: Path | None = None
    ) -> None:
        self.backend, self.lower, self.id = backend, lower, session_id
        self.env_dir = env_dir  # a Python environment: its bin first on PATH
        self.dir = backend.sessions_dir / session_id
        self.closed = False

    def _held(self) -> list[Path]:
        return [self.lower, *([self.env_dir] if self.env_dir else [])]

    @property
    def root(self) -> Path:
        return self.dir

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        env = interpreter_env()
        if self.env_dir:
            env["PATH"] = f"{self.env_dir / 'bin'}{os.pathsep}{env['PATH']}"
        return await LocalWorkspace(self.dir, env).exec(
            command, timeout_s=timeout_s, cwd=cwd, output_limit=output_limit
        )

    def kill_processes(self) -> int:
        return 0  # each command's process group is killed when the command ends

    def reset(self) -> None:
        remove_tree(self.dir)
        copy_tree(self.lower, self.dir)

    def fork(self, new_id: str | None = None) -> CopySession:
        child = CopySession(self.backend, self.lower, new_id or uuid.uuid4().hex[:12], self.env_dir)
        for path in self._held():
            self.backend.snapshots.retain(path)
        try:
            copy_tree(self.dir, child.dir)
        except BaseException:
            for path in self._held():
                self.backend.snapshots.release(path)
            raise
        return child

    def changed_paths(self, truncated: list[str] | None = None) -> list[str]:
        lower, now = SafeRoot(self.lower), SafeRoot(self.dir)
        return changed(lower, now, tree_files(lower) | tree_files(now, truncated))

    def diff(self, paths: list[str] | None = None) -> str:
        paths = self.changed_paths() if paths is None else paths
        return diff_text(SafeRoot(self.lower), SafeRoot(self.dir), paths)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        remove_tree(self.dir)
        for path in self._held():
            self.backend.snapshots.release(path)
