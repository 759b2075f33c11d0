"""`SandboxSessionFactory`: task workspaces as isolated sessions (bubblewrap + overlayfs).

The task's snapshot (directory, tarball or git commit, plus its patch) is materialized
once per distinct snapshot into a cache directory, then every workspace is an overlay
session over it: creating one costs a few mount calls. Commands (the task's setup,
the agent's terminal, the grader's tests) run sandboxed; hidden files reach the
session only when the grader installs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path

from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.env import LocalEnv
from cheetah.tasks.schema import Task
from cheetah.tasks.session import HostTaskWorkspace, TaskWorkspace
from cheetah.tasks.snapshot import materialize


class SandboxSessionFactory:
    name = "isolated"

    def __init__(self, config: SandboxConfig | None = None, capacity: int = 1024) -> None:
        self.env = LocalEnv("isolated", config=config, capacity=capacity)
        self.cache = self.env.backend.cfg.base_dir / "task-snapshots"
        self.cache.mkdir(parents=True, exist_ok=True)

    def _snapshot_dir(self, task: Task) -> Path:
        key = hashlib.sha256(task.snapshot.model_dump_json().encode()).hexdigest()[:20]
        dest = self.cache / key
        if not dest.is_dir():
            tmp = dest.with_name(f"{key}.tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            materialize(task.snapshot, tmp)
            try:
                tmp.rename(dest)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    async def create(self, task: Task) -> HostTaskWorkspace:
        src = await asyncio.to_thread(self._snapshot_dir, task)
        info = await self.env.create_session(f"dir:{src}")
        return HostTaskWorkspace(self.env.sessions[info.session_id].backend_session)

    async def close(self, workspace: TaskWorkspace) -> None:
        assert isinstance(workspace, HostTaskWorkspace)
        await self.env.close(workspace.workspace.id)  # type: ignore[attr-defined]


def factory_for(kind: str):
    """In-process task workspaces: ``isolated`` (this module) or ``local`` (unsandboxed temp
    copies, trusted use only). Sessions on env servers: ``cheetah.tasks.remote``."""
    if kind == "isolated":
        return SandboxSessionFactory()
    if kind == "local":
        from cheetah.tasks.session import LocalSessionFactory

        return LocalSessionFactory()
    raise ValueError(f"unknown sandbox kind {kind!r}; choose 'isolated' or 'local'")
