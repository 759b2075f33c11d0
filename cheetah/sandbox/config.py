"""Limits and places for isolated sessions: one typed config, one source of truth."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from cheetah.config import read_toml, validate


def default_base_dir() -> Path:
    return Path(
        os.environ.get("CHEETAH_SANDBOX_DIR", Path(tempfile.gettempdir()) / "cheetah-sandbox")
    )


class SandboxConfig(BaseModel):
    """What one isolated session may use. Every limit is enforced by the kernel, not by us."""

    model_config = {"extra": "forbid"}

    base_dir: Path = Field(
        default_factory=default_base_dir,
        description="where snapshots and session layers live on the host",
    )
    uid: int = Field(10001, description="uid the sandboxed commands run as (never root)")
    gid: int = Field(10001, description="gid the sandboxed commands run as")
    memory_mb: int = Field(1024, description="memory of all processes of a session (cgroup)")
    pids_max: int = Field(256, description="processes and threads of a session (cgroup)")
    cpus: float = Field(1.0, description="CPU share of a session, in cores (cgroup quota)")
    cpu_time_s: int = Field(300, description="CPU seconds one command may use (RLIMIT_CPU)")
    nproc: int = Field(512, description="processes of the sandbox uid (RLIMIT_NPROC backstop)")
    file_size_mb: int = Field(512, description="largest file a command may write (RLIMIT_FSIZE)")
    disk_mb: int = Field(1024, description="room for a session's changes (tmpfs under overlay)")
    tmp_mb: int = Field(256, description="size of /tmp inside the sandbox")
    open_files: int = Field(1024, description="open file descriptors per process (RLIMIT_NOFILE)")
    seccomp: bool = Field(
        True, description="refuse io_uring and keyring syscalls in commands (sandbox/seccomp.py)"
    )

    @classmethod
    def from_toml(cls, path: str | Path) -> SandboxConfig:
        """Read a config file; errors (``ConfigError``) name the file and the field."""
        return validate(cls, read_toml(path, "sandbox config"), f"sandbox config {str(path)!r}")
