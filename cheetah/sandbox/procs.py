"""Killing a session's commands where no cgroup holds them (the isolated backend without root).

Each command's launcher runs with the session dir as its cwd, so it can be found in
/proc. It is stopped first (so the children found are all it will have), then its
children and it are killed, by pidfd, so a pid reused meanwhile is never signalled.
With cgroups none of this is needed: ``cgroups.SessionCgroups.kill_all`` empties them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def kill_launchers(session_dir: Path) -> int:
    """Without cgroups: kill each command's launcher (a process whose cwd is the session
    dir: ``sh``, then bwrap's outer process) and its children (bwrap's inner process, init
    of the sandbox's pid namespace, which takes the namespace with it). Each launcher is
    stopped first, so the children found are all it will have: ``--die-with-parent``
    alone misses a child killed before it set that up. Signals go by pidfd, so a pid
    reused meanwhile is never signalled. Returns how many processes were killed."""
    here, killed = str(session_dir), 0
    for _ in range(20):  # until no launcher is left
        launchers = _pidfds(lambda pid: _proc_cwd(pid) == here)
        if not launchers:
            break
        for fd in launchers.values():
            _pidfd_signal(fd, signal.SIGSTOP)
        for pid in launchers:
            _wait_stopped(pid)
        parents = {str(pid) for pid in launchers}
        children = _pidfds(lambda pid, parents=parents: _proc_field(pid, 1) in parents)
        for fd in [*children.values(), *launchers.values()]:
            _pidfd_signal(fd, signal.SIGKILL)
            os.close(fd)
        killed += len(children) + len(launchers)
    return killed


def _proc_cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces), from
    the state on (index 0: state, 1: parent pid); None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _proc_field(pid: int, index: int) -> str | None:
    fields = proc_stat(pid)
    return fields[index] if fields and len(fields) > index else None


def _pidfds(match) -> dict[int, int]:
    """pid -> pidfd of the processes ``match(pid)`` accepts, checked again once the pidfd is
    open (so the pidfd is the process that matched, not a later one with its pid)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or not match(pid := int(name)):
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        if match(pid):
            out[pid] = fd
        else:
            os.close(fd)
    return out


def _pidfd_signal(fd: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # already gone
        signal.pidfd_send_signal(fd, sig)


def _wait_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """Until ``pid`` is stopped or gone (a fork it was in has then completed)."""
    deadline = time.monotonic() + timeout_s
    while _proc_field(pid, 0) not in (None, "T", "t", "Z", "X") and time.monotonic() < deadline:
        time.sleep(0.001)
