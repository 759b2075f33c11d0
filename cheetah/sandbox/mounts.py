"""mount(2) and umount2(2) through ctypes.

Written here rather than calling the ``mount`` program because a session's create
and reset are two or three mounts each, and a process spawn per mount would cost
more than the mounts (the goal is a create under 50 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MNT_DETACH = 2


def mount(source: str, target: Path, fstype: str | None, flags: int = 0, data: str = "") -> None:
    rc = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} on {target}: {os.strerror(err)}")


def umount(target: Path, lazy: bool = False) -> None:
    if _libc.umount2(str(target).encode(), MNT_DETACH if lazy else 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def detach(target: Path, max_stacked: int = 8) -> int:
    """Unmount every mount stacked on ``target`` (lazily when one is busy); how many."""
    n = 0
    while n < max_stacked and is_mounted(target):
        try:
            umount(target)
        except OSError:
            with contextlib.suppress(OSError):  # gone meanwhile (another process took it)
                umount(target, lazy=True)
        n += 1
    return n


def bind_readonly(source: Path, target: Path) -> None:
    """A read-only bind mount (bind, then remount read-only, as the kernel requires)."""
    target.mkdir(parents=True, exist_ok=True)
    mount(str(source), target, None, MS_BIND)
    mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


@contextlib.contextmanager
def flocked(path: str):
    """An exclusive ``flock`` on the file ``path`` (made if missing) for the block: servers
    sharing a base dir take it around mounting or unmounting what they share."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point; unlike ``os.path.ismount`` this sees bind mounts
    from the same filesystem (which share its device number)."""
    target = str(Path(path).resolve())
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4] == target for line in fh)
    except OSError:
        return os.path.ismount(target)
