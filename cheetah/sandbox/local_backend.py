"""The trusted backend: a session is a plain copy of the snapshot, commands run unsandboxed.

For trusted local use only (your own code, tests of this package). It exists so that
the session operations (create, diff, reset, fork, close) work where bubblewrap
does not, and it must be chosen explicitly: ``LocalEnv(backend="local")``. Commands see
this interpreter first on ``PATH``, as in the isolated sandbox (``interpreter_env``).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path

from cheetah.core.safefs import SafeRoot
from cheetah.core.workspace import ExecResult, LocalWorkspace, interpreter_env
from cheetah.sandbox.diff import changed, tree_files
from cheetah.sandbox.diff import diff as diff_text
from cheetah.sandbox.snapshot import SnapshotSpec, SnapshotStore

DESCRIPTION = "none (trusted local backend: commands run unsandboxed as the server's user)"


class LocalBackend:
    def __init__(self, base_dir: Path | None = None) -> None:
        self.base = Path(base_dir or tempfile.mkdtemp(prefix="cheetah-local-"))
        if base_dir is None:  # its own temp dir: gone with the backend
            weakref.finalize(self, shutil.rmtree, self.base, True)
        self.snapshots = SnapshotStore(self.base)
        self.sessions_dir = self.base / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return DESCRIPTION

    async def create(
        self, spec: SnapshotSpec, session_id: str | None = None, refresh: bool = False
    ) -> CopySession:
        lower = await asyncio.to_thread(self.snapshots.materialize, spec, refresh)
        session = CopySession(self, lower, session_id or uuid.uuid4().hex[:12])
        await asyncio.to_thread(shutil.copytree, lower, session.dir, symlinks=True)
        return session


class CopySession:
    def __init__(self, backend: LocalBackend, lower: Path, session_id: str) -> None:
        self.backend, self.lower, self.id = backend, lower, session_id
        self.dir = backend.sessions_dir / session_id
        self.closed = False

    @property
    def root(self) -> Path:
        return self.dir

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        return await LocalWorkspace(self.dir, interpreter_env()).exec(
            command, timeout_s=timeout_s, cwd=cwd, output_limit=output_limit
        )

    def kill_processes(self) -> int:
        return 0  # each command's process group is killed when the command ends

    def reset(self) -> None:
        shutil.rmtree(self.dir)
        shutil.copytree(self.lower, self.dir, symlinks=True)

    def fork(self, new_id: str | None = None) -> CopySession:
        child = CopySession(self.backend, self.lower, new_id or uuid.uuid4().hex[:12])
        shutil.copytree(self.dir, child.dir, symlinks=True)
        return child

    def changed_paths(self) -> list[str]:
        lower, now = SafeRoot(self.lower), SafeRoot(self.dir)
        return changed(lower, now, tree_files(lower) | tree_files(now))

    def diff(self) -> str:
        return diff_text(SafeRoot(self.lower), SafeRoot(self.dir), self.changed_paths())

    def close(self) -> None:
        self.closed = True
        shutil.rmtree(self.dir, ignore_errors=True)
