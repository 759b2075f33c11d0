"""Per-session cgroup v1 groups (memory, pids, cpu): limits, membership, kill-all.

A session's commands join its groups before bubblewrap starts (the launcher
writes its own pid into ``cgroup.procs`` and then execs), so every process the
sandbox ever forks is counted and can be found again to be killed at close.
cgroup v2 on this kind of host has no memory controller, hence v1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from cheetah.sandbox.capabilities import CGROUP_V1
from cheetah.sandbox.config import SandboxConfig

PARENT = "cheetah"


class SessionCgroups:
    def __init__(self, session_id: str, controllers: tuple[str, ...], cfg: SandboxConfig) -> None:
        self.dirs = {c: CGROUP_V1 / c / PARENT / session_id for c in controllers}
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

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes are still exiting
                    time.sleep(0.02)


def _write(path: Path, value: str) -> None:
    path.write_text(value)
