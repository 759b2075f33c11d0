"""`Workspace`: the files an agent works on plus a way to run commands next to them.

Tools act only through a Workspace, so one tool implementation serves the user's
repo (``LocalWorkspace``, trusted, no isolation) and a sandboxed session (the
isolated backends in this package). File tools read and write under ``root`` on
this host by descriptor only (``safefs.SafeRoot``: no path of session content is ever
resolved on the host); commands go through ``exec``, which the backend isolates as it
sees fit. ``resolve_path`` remains for the trusted local workspace's command cwd.

``LocalWorkspace`` runs commands with the user's own rights: it exists for the
product path on the user's own repo and must be chosen explicitly. It does not
isolate anything; it only bounds time and output and kills the command's whole
process group when the command ends, so a stray ``cmd &`` cannot hold the pipe
open or outlive the call (``setsid`` detaches deliberately).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


class PathError(ValueError):
    """A path the agent gave cannot be used: outside the workspace, absolute, or malformed."""


@dataclass
class ExecResult:
    """The end of one command: exit code (None when killed), combined output, flags."""

    exit_code: int | None
    output: str
    timed_out: bool
    wall_s: float
    omitted_bytes: int = 0


@runtime_checkable
class Workspace(Protocol):
    """Files under ``root`` (a directory on this host) and command execution beside them."""

    @property
    def root(self) -> Path: ...

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult: ...


def resolve_path(root: Path, path: str, *, must_exist: bool = False) -> Path:
    """Map an agent-supplied relative path to a host path inside ``root``.

    Refuses absolute paths, ``..`` escapes and symlinks that lead outside ``root``
    (the check runs on the fully resolved path, so a link anywhere on the way counts).
    """
    raw = path.strip()
    if not raw:
        raise PathError("empty path; give a path relative to the workspace root, like src/app.py")
    if "\x00" in raw:
        raise PathError(f"path {raw!r} contains a NUL byte")
    if os.path.isabs(raw) or raw.startswith("~"):
        raise PathError(
            f"path {raw!r} is absolute; give a path relative to the workspace root, like src/app.py"
        )
    base = root.resolve()
    target = (base / raw).resolve()
    if target != base and base not in target.parents:
        raise PathError(f"path {raw!r} leads outside the workspace")
    if must_exist and not target.exists():
        raise PathError(f"path {raw!r} does not exist")
    return target


JUNK_PARTS = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".git"})
JUNK_SUFFIXES = (".pyc", ".pyo")


class TreeTooLarge(ValueError):
    """A workspace holds more file bytes than a reader agreed to take."""


def is_junk(rel: Path) -> bool:
    """Caches and bytecode, never part of a diff or a scope check."""
    return bool(JUNK_PARTS.intersection(rel.parts)) or rel.name.endswith(JUNK_SUFFIXES)


class HeadTail:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts what is between."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.omitted:
            return f"{head}\n[... {self.omitted} bytes of output omitted ...]\n{tail}"
        return head + tail


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    timeout_s: float,
    output_limit: int,
    env: dict[str, str] | None = None,
) -> ExecResult:
    """Run ``argv`` in its own process group; stdout and stderr merged, capped as head+tail.

    On timeout, or once the main process has exited, the whole group is killed.
    """
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    buf = HeadTail(output_limit)

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            buf.feed(chunk)

    reader = asyncio.create_task(pump())
    timed_out = False
    try:
        # Not proc.wait(): asyncio's wait also waits for the pipe to close, which a
        # background child (`cmd &`) would hold open.
        await asyncio.wait_for(_exited(proc), timeout=timeout_s)
    except TimeoutError:
        timed_out = True
    except asyncio.CancelledError:  # the caller gave up (e.g. the agent's wall limit)
        _kill_group(proc.pid)
        reader.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=1.0)
        raise
    finally:
        _kill_group(proc.pid)
    try:
        # Output already written is in the pipe; the group is dead, so EOF comes.
        await asyncio.wait_for(reader, timeout=1.0)
    except TimeoutError:
        reader.cancel()  # a deliberately detached (setsid) child still holds the pipe
    await _exited(proc)
    code = None if timed_out else proc.returncode
    return ExecResult(
        exit_code=code,
        output=buf.text(),
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        omitted_bytes=buf.omitted,
    )


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait until the process has exited and asyncio has its return code."""
    fd = None
    if proc.returncode is None:
        try:
            fd = os.pidfd_open(proc.pid)
        except (OSError, AttributeError):  # already reaped, or no pidfd: poll below
            fd = None
    if fd is not None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    while proc.returncode is None:  # the child watcher sets it moments after exit
        await asyncio.sleep(0.002)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def interpreter_env() -> dict[str, str]:
    """This process's environment with its interpreter's folder first on ``PATH`` (so
    ``python`` and ``pytest`` in a command are the ones cheetah runs with, as in the
    sandbox), ``PYTHONDONTWRITEBYTECODE=1`` (no bytecode cluttering a diff) and
    ``PYTHONHASHSEED=0`` (test ids built from sets are the same in every run: graders and
    the generator match ids across runs)."""

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.pop("PYTEST_ADDOPTS", None)
    return env


class LocalWorkspace:
    """A directory on this host, commands run unsandboxed with ``bash -c`` (trusted use only)
    in ``env`` (default: this process's environment)."""

    def __init__(self, root: str | Path, env: dict[str, str] | None = None) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"workspace root {str(path)!r} is not a directory")
        self._root = path.resolve()
        self.env = env

    @property
    def root(self) -> Path:
        return self._root

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        workdir = resolve_path(self._root, cwd, must_exist=True)
        return await run_process(
            ["bash", "-c", command],
            cwd=workdir,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env=self.env,
        )
