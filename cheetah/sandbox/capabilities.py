"""What isolation this host can give, detected at start instead of assumed.

Checks: bubblewrap runs (as the sandbox uid when we are root, else as ourselves)
with new user, pid, net, ipc and uts namespaces; overlayfs and tmpfs can be mounted
(root only); cgroup v1 memory, pids and cpu hierarchies accept child groups. The
isolated backend refuses to start without bubblewrap; it never falls back to
running commands unsandboxed. Without the pids cgroup, a session's processes are
bounded only by RLIMIT_NPROC, which counts all processes of the uid, so all
sessions share it; ``describe`` says which applies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")


@dataclass(frozen=True)
class Capabilities:
    bwrap: str | None
    bwrap_error: str = ""
    root: bool = False
    overlay: bool = False
    cgroups: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None and not self.bwrap_error

    def describe(self) -> str:
        if not self.isolated:
            return f"no isolation available: {self.bwrap_error or 'bubblewrap not found'}"
        parts = [
            "bubblewrap (user, pid, net, ipc, uts, mount namespaces; read-only system dirs)",
            "commands as a dedicated non-root uid" if self.root else "commands as the calling user",
            "overlayfs session layers on size-capped tmpfs"
            if self.overlay
            else "sessions copied from the snapshot (no overlayfs: not root)",
            f"cgroup v1 limits: {', '.join(self.cgroups)}"
            if self.cgroups
            else "no cgroup limits (rlimits only)",
            "rlimits: CPU time, file size, open files (processes: the pids cgroup per session)"
            if "pids" in self.cgroups
            else "rlimits: CPU time, file size, processes (shared by all sessions), open files",
        ]
        return "; ".join(parts)


def _try_bwrap(bwrap: str, uid: int, gid: int) -> str:
    argv = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "/bin/sh",
        "-c",
        "echo ok",
    ]
    if os.geteuid() == 0:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap did not start: {e}"
    if out.returncode != 0 or out.stdout.strip() != "ok":
        return f"bubblewrap failed (exit {out.returncode}): {out.stderr.strip()[:300]}"
    return ""


def _cgroup_ok(controller: str) -> bool:
    base = CGROUP_V1 / controller
    probe = base / f"cheetah-probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
        return True
    except OSError:
        return False


@cache
def detect(uid: int = 10001, gid: int = 10001) -> Capabilities:
    bwrap = shutil.which("bwrap")
    root = os.geteuid() == 0
    if bwrap is None:
        return Capabilities(
            bwrap=None,
            bwrap_error="bubblewrap (bwrap) is not installed; "
            "install the Debian package 'bubblewrap'",
            root=root,
        )
    error = _try_bwrap(bwrap, uid, gid)
    cgroups = tuple(c for c in CONTROLLERS if root and _cgroup_ok(c))
    return Capabilities(bwrap=bwrap, bwrap_error=error, root=root, overlay=root, cgroups=cgroups)
