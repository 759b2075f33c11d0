"""Per-session cgroup v1 groups (memory, pids, cpu): limits, membership, kill-all.

A session's commands join its groups before bubblewrap starts (the launcher
writes its own pid into ``cgroup.procs`` and then execs), so every process the
sandbox ever forks is counted and can be found again to be killed at close.
cgroup v2 on this kind of host has no memory controller, hence v1.

The groups are ``/sys/fs/cgroup/<controller>/cheetah/<tag>-<session id>``, where
``tag`` names the base dir (``base_tag``): two servers with different base dirs
may use the same client-given session id without sharing (or killing) each
other's groups, and ``reclaim`` can find a dead session's groups from its dir.
The pids group is the session's process limit; it is per session, unlike
RLIMIT_NPROC, which counts every process of the sandbox uid on the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from pathlib import Path

from cheetah.sandbox.capabilities import CGROUP_V1, CONTROLLERS
from cheetah.sandbox.config import SandboxConfig

PARENT = "cheetah"


def base_tag(base_dir: str | Path) -> str:
    """A short name for a base dir (its resolved path hashed), the prefix of its group names."""
    return hashlib.sha256(str(Path(base_dir).resolve()).encode()).hexdigest()[:8]


def group_name(base_dir: str | Path, session_id: str) -> str:
    return f"{base_tag(base_dir)}-{session_id}"


def _check_name(name: str) -> str:
    # Callers validate session ids (reclaim.check_session_id); this guards the path itself.
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise ValueError(f"cgroup name {name!r} is not a single path component")
    return name


class SessionCgroups:
    def __init__(self, name: str, controllers: tuple[str, ...], cfg: SandboxConfig) -> None:
        """Create (or take over) the groups ``cheetah/<name>`` and write the session's limits."""
        self.dirs = {c: CGROUP_V1 / c / PARENT / _check_name(name) for c in controllers}
        for c, d in self.dirs.items():
            d.mkdir(parents=True, exist_ok=True)
            if c == "memory":
                limit = str(cfg.memory_mb * 1024 * 1024)
                _write(d / "memory.limit_in_bytes", limit)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    _write(d / "memory.memsw.limit_in_bytes", limit)
            elif c == "pids":
                _write(d / "pids.max", str(cfg.pids_max))
            elif c == "cpu":
                _write(d / "cpu.cfs_period_us", "100000")
                _write(d / "cpu.cfs_quota_us", str(int(cfg.cpus * 100000)))

    @classmethod
    def existing(cls, name: str) -> SessionCgroups:
        """The groups named ``name`` that exist now, without creating or changing any."""
        self = cls.__new__(cls)
        dirs = {c: CGROUP_V1 / c / PARENT / _check_name(name) for c in CONTROLLERS}
        self.dirs = {c: d for c, d in dirs.items() if d.is_dir()}
        return self

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                found |= {int(x) for x in f.read_text().split()}
        return found

    def kill_all(self, timeout_s: float = 5.0) -> int:
        """SIGKILL every process in the session until none is left; returns how many."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed |= pids
            time.sleep(0.01)
        return len(killed)

    def memory_peak_bytes(self) -> int | None:
        d = self.dirs.get("memory")
        if d is None:
            return None
        try:
            return int((d / "memory.max_usage_in_bytes").read_text())
        except OSError:
            return None

    def remove(self) -> int:
        """Kill every process, then remove the groups; returns how many processes were killed."""
        killed = self.kill_all()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes are still exiting
                    time.sleep(0.02)
        return killed


def _write(path: Path, value: str) -> None:
    path.write_text(value)
