"""The bubblewrap command line of one sandboxed command: what the command sees.

``bwrap_argv`` is pure: from the mounts a sandbox provides (``BwrapMounts``) and the command,
the argv that runs ``bash -c command`` in new namespaces (all of them, a user namespace too,
and no nested ones: ``--disable-userns``), with every capability dropped, the seccomp filter
read from an inherited descriptor, ``/usr`` and the top-level library dirs read-only, a few
files of the host's ``/etc`` (and the sandbox's own ``passwd``, ``group``, ``hosts``), a fresh
``/proc``, ``/dev`` and a size-capped ``/tmp``, the interpreter's runtime read-only, the
session's merged overlay at ``/workspace``, the session's Python environment (if it has one)
read-only at ``/env`` with its ``bin`` first on ``PATH``, and a cleared environment.
``isolated.py`` wraps it in the launcher (cgroups, stop epoch, ``prlimit``, ``setpriv``) and
owns the sessions.
Left out: any network access (the command gets a network namespace of its own).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

WORKSPACE = "/workspace"
ENV_DIR = "/env"


@dataclass(frozen=True)
class BwrapMounts:
    """What a sandbox gives every command: the bwrap binary, the seccomp filter's descriptor
    (None: no filter), its ``/etc`` dir, the runtime (host path, path inside) pairs, the
    session's workspace on the host and the size of ``/tmp``."""

    bwrap: str
    seccomp_fd: int | None
    etc: Path
    runtime: list[tuple[Path, Path]]
    workspace: Path
    tmp_bytes: int
    env: Path | None = None  # a Python environment, bound read-only at ENV_DIR


def bwrap_argv(m: BwrapMounts, command: str, cwd_inside: str) -> list[str]:
    """``bwrap ... -- /bin/bash -c command``, started in ``cwd_inside``."""
    bwrap = [
        m.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
        *(["--seccomp", str(m.seccomp_fd)] if m.seccomp_fd is not None else []),
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("bin", "sbin", "lib", "lib64", "lib32"):
        host = Path("/") / top
        if host.is_symlink():
            bwrap += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            bwrap += ["--ro-bind", str(host), f"/{top}"]
    for name in (
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "alternatives",
        "localtime",
        "nsswitch.conf",
        "ssl",
        "ca-certificates",
    ):
        bwrap += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for name in ("passwd", "group", "hosts"):
        bwrap += ["--ro-bind", str(m.etc / name), f"/etc/{name}"]
    venv_bin = Path(sys.prefix) / "bin"
    bwrap += [
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--dev",
        "/dev",
        "--size",
        str(m.tmp_bytes),
        "--tmpfs",
        "/tmp",
    ]
    # The interpreter after /tmp, which would otherwise hide one that lives under /tmp.
    for source, inside in m.runtime:
        bwrap += ["--ro-bind", str(source), str(inside)]
    path = f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"
    if m.env is not None:
        bwrap += ["--ro-bind", str(m.env), ENV_DIR]
        path = f"{ENV_DIR}/bin:{path}"
    bwrap += [
        "--bind",
        str(m.workspace),
        WORKSPACE,
        "--chdir",
        cwd_inside,
        "--clearenv",
        "--setenv",
        "PATH",
        path,
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "USER",
        "agent",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",  # test ids built from sets are then the same in every run (graders match ids)
        "PYTHONHASHSEED",
        "0",
        "--setenv",
        "TERM",
        "dumb",
        "--disable-userns",
        "--",
        "/bin/bash",
        "-c",
        command,
    ]
    return bwrap
