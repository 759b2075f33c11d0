"""The isolated backend: bubblewrap sessions over an overlayfs layer of a read-only snapshot.

Per session on the host (``base_dir/sessions/<id>``):

- ``layer/``: a tmpfs of ``disk_mb`` holding the overlay ``upper`` and ``work`` dirs,
  so a session's changes are capped in size and a reset is an unmount;
- ``merged/``: the overlay of ``upper`` on the snapshot; commands see it as
  ``/workspace``; the host's file tools, diff and file API reach it only by descriptor
  through ``safefs.SafeRoot`` (no path of session content is resolved on the host,
  no link followed, only regular files read, reads capped), and a command's cwd is
  resolved by bwrap inside the sandbox.

Each command runs as ``sh`` (root) joining the session's cgroups (and killing itself
if the session was stopped since the command began) -> ``prlimit`` (CPU time, file
size, open files; processes only where no pids cgroup bounds the session, since
RLIMIT_NPROC counts the uid every session shares) -> ``setpriv`` to the sandbox uid ->
``bwrap`` with new user, pid, net, ipc, uts and cgroup namespaces, read-only
``/usr`` and interpreter, a private ``/tmp`` and ``/dev``, ``/proc/sys`` read-only,
no network but loopback. Close kills every process in the session's cgroups and
unmounts. Session ids are opaque tokens (``reclaim.check_session_id``), never paths;
each session dir records its server (``owner.json``) so that a server starting on the
same base dir reclaims what a dead one left (``reclaim.reclaim_dead_sessions``). Without root there is no overlay (the session is a copy) and no cgroup,
and bwrap runs as the calling user; ``capabilities.detect`` says which applies.

bwrap also loads a seccomp filter (``seccomp.py``: io_uring and the keyring refused)
where the architecture is known and ``SandboxConfig.seccomp`` is on.

Deliberately left out: a default-deny syscall list, a full VM (no guest boots on these
hosts).
Longer than most modules because a session's lifecycle and its launcher command line
belong together; what stands apart lives beside it (safefs, diff, procs, reclaim).
tests/sandbox/test_host_attacks.py attacks the host side (swap races, planted links,
FIFOs, sparse files) and must find nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import resource
import shlex
import sys
import threading
import uuid
import weakref
from pathlib import Path

from cheetah.core.safefs import SafeRoot, split
from cheetah.core.workspace import ExecResult, PathError, run_process
from cheetah.limits import ServerLimits
from cheetah.sandbox import mounts, seccomp
from cheetah.sandbox.bwrap import WORKSPACE, BwrapMounts, bwrap_argv
from cheetah.sandbox.capabilities import Capabilities, detect
from cheetah.sandbox.cgroups import SessionCgroups, group_name
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.diff import changed, layer_paths, tree_files
from cheetah.sandbox.diff import diff as diff_text
from cheetah.sandbox.procs import kill_launchers
from cheetah.sandbox.reclaim import (
    Owner,
    SessionIdTaken,
    check_session_id,
    reclaim_dead_sessions,
    write_owner,
)
from cheetah.sandbox.snapshot import SnapshotSpec
from cheetah.sandbox.store import SnapshotStore
from cheetah.sandbox.trees import copy_tree, remove_tree

_SECCOMP_FD = 9


class SandboxUnavailable(RuntimeError):
    """This host cannot isolate commands; nothing runs unsandboxed instead."""


def _runtime_dirs() -> list[Path]:
    """The interpreter and its environment, visible read-only inside (tests and ruff need them)."""
    dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return sorted(d for d in dirs if d != Path("/usr"))


def _release_runtime(held: list[tuple[int, Path]]) -> None:
    """Unmount the runtime mounts in ``held`` that no other server on the base dir holds."""
    while held:
        users, target = held.pop()
        try:
            with mounts.flocked(f"{target}.mnt"):
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alone with it?
                except BlockingIOError:
                    continue  # another server still runs sessions with it
                mounts.detach(target)
        finally:
            os.close(users)


_RELEASES: list[weakref.finalize] = []


def close_live_sandboxes() -> None:
    """Release the runtime mounts of every ``Sandbox`` of this process not yet closed. Each
    ``Sandbox`` releases its own when it is closed, collected, or the process exits, so an
    in-process ``TaskEnv``, ``tools run --sandbox`` or OpenEnv server that never called
    ``LocalEnv.aclose`` leaves no mount behind; this runs them all now."""
    for release in list(_RELEASES):
        release()
    _RELEASES[:] = [r for r in _RELEASES if r.alive]


class Sandbox:
    """Host-level state shared by sessions: config, capabilities, snapshots, runtime mounts."""

    def __init__(
        self, cfg: SandboxConfig | None = None, *, limits: ServerLimits | None = None
    ) -> None:
        self.cfg = cfg or SandboxConfig()
        self.caps: Capabilities = detect(self.cfg.uid, self.cfg.gid)
        if not self.caps.isolated:
            raise SandboxUnavailable(self.caps.describe())
        base = self.cfg.base_dir
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o711)
        owner = (self.cfg.uid, self.cfg.gid) if self.caps.root else (None, None)
        self.snapshots = SnapshotStore(base, *owner, limits=limits)
        os.chmod(self.snapshots.dir, 0o711)
        self.sessions_dir = base / "sessions"
        self.sessions_dir.mkdir(exist_ok=True)
        os.chmod(self.sessions_dir, 0o711)
        # Recorded in each session dir, so a later server can tell our sessions from a dead
        # server's; what a dead one left here (mounts, cgroups, dirs) is taken back now.
        self.owner = Owner.current()
        self.reclaimed = reclaim_dead_sessions(base)
        for r in self.reclaimed:
            logging.getLogger(__name__).warning(
                "reclaimed session %s of dead server pid %s: %d processes killed, "
                "%d mounts, %d cgroups",
                r.session_id,
                r.owner_pid,
                r.killed,
                len(r.unmounted),
                len(r.cgroups),
            )
        self.etc = self._write_etc(base / "etc")
        self.seccomp = seccomp.write_program(base / "seccomp.bpf") if self.cfg.seccomp else None
        self._runtime_users: list[tuple[int, Path]] = []
        self.runtime = self._mount_runtime(base / "runtime")
        # at close, when collected, or at exit, whichever comes first (once)
        self._release = weakref.finalize(self, _release_runtime, self._runtime_users)
        _RELEASES.append(self._release)

    def _write_etc(self, etc: Path) -> Path:
        etc.mkdir(exist_ok=True)
        uid, gid = (self.cfg.uid, self.cfg.gid) if self.caps.root else (os.getuid(), os.getgid())
        (etc / "passwd").write_text(
            f"root:x:0:0::/:/bin/sh\nagent:x:{uid}:{gid}::{WORKSPACE}:/bin/bash\n"
        )
        (etc / "group").write_text(f"root:x:0:\nagent:x:{gid}:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n")
        os.chmod(etc, 0o755)
        return etc

    def _mount_runtime(self, base: Path) -> list[tuple[Path, Path]]:
        """(host source, path inside) pairs. As root, sources under /root and other closed dirs
        are bind-mounted read-only under ``base`` first, so the sandbox uid can reach them.

        Servers on one base dir share these mounts: each holds a shared ``flock`` on
        ``<mount>.users`` while it runs, and ``close`` unmounts when no other holds one;
        ``<mount>.mnt`` is held, briefly, by whoever mounts or unmounts."""
        pairs = []
        for d in _runtime_dirs():
            if not self.caps.root:
                pairs.append((d, d))
                continue
            # Named by the source, so interpreters of other checkouts never collide.
            target = base / hashlib.sha256(str(d).encode()).hexdigest()[:16]
            target.parent.mkdir(parents=True, exist_ok=True)
            with mounts.flocked(f"{target}.mnt"):
                if mounts.is_mounted(target) and not _same_dir(target, d):
                    mounts.umount(target, lazy=True)  # left by a deleted and re-made checkout
                if not mounts.is_mounted(target):
                    mounts.bind_readonly(d, target)
                os.chmod(base, 0o711)
                users = os.open(f"{target}.users", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(users, fcntl.LOCK_SH)  # held until close
            self._runtime_users.append((users, target))
            pairs.append((target, d))
        return pairs

    def close(self) -> None:
        """Unmount the runtime mounts no other server on this base dir still holds."""
        self._release()

    def describe(self) -> str:
        extra = ", seccomp filter (io_uring, keyring refused)" if self.seccomp else ""
        return self.caps.describe() + extra

    async def create(
        self,
        spec: SnapshotSpec,
        session_id: str | None = None,
        refresh: bool = False,
        env: SnapshotSpec | None = None,
    ) -> IsolatedSession:
        """A new session; ``InvalidSessionId`` for an id that is not an opaque token,
        ``SessionIdTaken`` when the base dir already has a session of that id. ``env``: a
        Python environment, kept in the snapshot store, bound read-only at ``/env``."""
        if session_id is not None:
            check_session_id(session_id)  # before anything touches the disk
        env_dir = await asyncio.to_thread(self.snapshots.acquire, env) if env else None
        try:
            lower = await asyncio.to_thread(self.snapshots.acquire, spec, refresh)
        except BaseException:
            if env_dir:
                self.snapshots.release(env_dir)
            raise
        try:
            session = IsolatedSession(self, lower, session_id or uuid.uuid4().hex[:12], env_dir)
            await asyncio.to_thread(session.setup)
        except BaseException:
            self.snapshots.release(lower)
            if env_dir:
                self.snapshots.release(env_dir)
            raise
        session.holds_lower = True
        return session


class IsolatedSession:
    """One sandboxed workspace. Implements the ``Workspace`` protocol."""

    def __init__(
        self, sandbox: Sandbox, lower: Path, session_id: str, env_dir: Path | None = None
    ) -> None:
        self.sandbox, self.lower, self.id = sandbox, lower, check_session_id(session_id)
        self.env_dir = env_dir  # held in the snapshot store with ``lower`` (``holds_lower``)
        self.dir = sandbox.sessions_dir / session_id
        self.layer = self.dir / "layer"
        self.merged = self.dir / "merged"
        self.epoch_file = self.dir / "stop-epoch"
        self.cgroups: SessionCgroups | None = None
        self.closed = False
        # Whether close releases ``lower`` in the snapshot store: set by whoever acquired it
        # for this session (``Sandbox.create``, ``fork``) once setup succeeded.
        self.holds_lower = False
        # Bumped by every kill_processes; a launcher built before the bump kills itself
        # instead of starting the command (see _argv), which closes the window in which
        # a command is spawned but not yet in the session's cgroups.
        self.stop_epoch = 0
        self._stop_lock = threading.Lock()

    # -- Workspace protocol -------------------------------------------------
    @property
    def root(self) -> Path:
        return self.merged

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        if self.closed:
            raise RuntimeError(f"session {self.id} is closed")
        parts = split(cwd) if cwd.strip() not in ("", ".") else ()
        if SafeRoot(self.merged).kind(cwd) != "dir":  # only for a clear error: bwrap resolves it
            raise PathError(f"cwd {cwd!r} is not a directory of the workspace")
        argv = self._argv(command, "/".join((WORKSPACE, *parts)))
        return await run_process(
            argv,
            cwd=self.dir,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env={"PATH": "/usr/bin:/bin"},
        )

    # -- lifecycle -------------------------------------------------------------
    def setup(self, copy_from: IsolatedSession | None = None) -> None:
        """Directories, owner record, cgroups and layers; the files are the snapshot's, or
        ``copy_from``'s. ``SessionIdTaken`` if the dir exists; on any other failure what was
        made is taken down again."""
        try:
            self.dir.mkdir(mode=0o711)
        except FileExistsError:
            raise SessionIdTaken(f"session {self.id!r} already exists") from None
        try:
            write_owner(self.dir, self.sandbox.owner)  # first: reclaim skips dirs without one
            self._write_epoch()
            caps, cfg = self.sandbox.caps, self.sandbox.cfg
            if caps.cgroups:
                name = group_name(cfg.base_dir, self.id)
                self.cgroups = SessionCgroups(name, caps.cgroups, cfg)
            if caps.overlay:
                self.merged.mkdir()
                self.layer.mkdir()
                self._mount_layers(upper_from=copy_from.layer / "upper" if copy_from else None)
            else:
                copy_tree(copy_from.merged if copy_from else self.lower, self.merged)
        except BaseException:
            self.close()
            raise

    def _write_epoch(self) -> None:
        tmp = self.dir / ".stop-epoch.tmp"
        tmp.write_text(str(self.stop_epoch))
        tmp.replace(self.epoch_file)

    def _mount_layers(self, upper_from: Path | None = None) -> None:
        cfg = self.sandbox.cfg
        mounts.mount(
            "tmpfs",
            self.layer,
            "tmpfs",
            mounts.MS_NOSUID | mounts.MS_NODEV,
            f"size={cfg.disk_mb}m,mode=0711",
        )
        upper, work = self.layer / "upper", self.layer / "work"
        if upper_from is not None:
            _copy_layer(upper_from, upper)
        else:
            upper.mkdir()
        work.mkdir()
        os.chown(upper, cfg.uid, cfg.gid)
        mounts.mount(
            "overlay",
            self.merged,
            "overlay",
            mounts.MS_NOSUID | mounts.MS_NODEV,
            f"lowerdir={self.lower},upperdir={upper},workdir={work}",
        )

    def _unmount_layers(self) -> None:
        for target in (self.merged, self.layer):
            mounts.detach(target)

    def kill_processes(self) -> int:
        """Kill every process of the session, commands still starting included; returns how
        many were killed. The stop epoch goes up first, so a launcher that has not joined the
        cgroups by the time they are emptied finds the new epoch and kills itself (_argv)."""
        with self._stop_lock:
            self.stop_epoch += 1
            with contextlib.suppress(OSError):  # the dir is gone once closed
                self._write_epoch()
        if self.cgroups:
            return self.cgroups.kill_all()
        return kill_launchers(self.dir)

    def reset(self) -> None:
        """Back to the snapshot: processes killed, changes dropped."""
        self.kill_processes()
        if self.sandbox.caps.overlay:
            self._unmount_layers()
            self._mount_layers()
        else:
            remove_tree(self.merged)
            copy_tree(self.lower, self.merged)

    def fork(self, new_id: str | None = None) -> IsolatedSession:
        """A new session starting from this one's current files."""
        child = IsolatedSession(
            self.sandbox, self.lower, new_id or uuid.uuid4().hex[:12], self.env_dir
        )
        held = [self.lower, *([self.env_dir] if self.env_dir else [])]
        for path in held:
            self.sandbox.snapshots.retain(path)
        try:
            child.setup(copy_from=self)
        except BaseException:
            for path in held:
                self.sandbox.snapshots.release(path)
            raise
        child.holds_lower = True
        return child

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.kill_processes()
        self._unmount_layers()
        if self.cgroups:
            self.cgroups.remove()
        remove_tree(self.dir)
        if self.holds_lower:
            self.holds_lower = False
            self.sandbox.snapshots.release(self.lower)
            if self.env_dir:
                self.sandbox.snapshots.release(self.env_dir)

    # -- diff ------------------------------------------------------------------
    def changed_paths(self, truncated: list[str] | None = None) -> list[str]:
        """Workspace-relative paths that differ from the snapshot (added, changed, deleted);
        directories too deep to compare go to ``truncated``."""
        lower, merged = SafeRoot(self.lower), SafeRoot(self.merged)
        if self.sandbox.caps.overlay:
            candidates = layer_paths(SafeRoot(self.layer / "upper"), lower, truncated)
        else:
            candidates = tree_files(lower) | tree_files(merged, truncated)
        return changed(lower, merged, candidates)

    def diff(self, paths: list[str] | None = None) -> str:
        """A unified diff (a/ = snapshot, b/ = now) of ``paths`` (default: every changed
        one), binary and large files named, not shown."""
        paths = self.changed_paths() if paths is None else paths
        return diff_text(SafeRoot(self.lower), SafeRoot(self.merged), paths)

    # -- command line ------------------------------------------------------------
    def _argv(self, command: str, cwd_inside: str, epoch: int | None = None) -> list[str]:
        """The launcher: ``sh`` joins the session's cgroups (as root), checks the stop epoch,
        then execs ``prlimit`` -> ``setpriv`` (as root) -> ``bwrap`` -> ``bash -c command``.

        ``epoch`` is the stop epoch the command began under (the current one by default; an
        ``exec`` that awaits before building its argv passes the one it saw on entry). When
        ``kill_processes`` has run since, the launcher kills itself instead of starting the
        command: either it joined the cgroups before they were emptied (and died there), or
        it reads the new epoch after joining. Without cgroups the same holds for the /proc
        scan of ``procs.kill_launchers``, which finds the launcher by its cwd.

        Processes: with the pids cgroup, the session's ``pids.max`` is its limit and
        RLIMIT_NPROC is lifted to the server's hard limit (``unlimited`` where the server may
        raise it), since it counts every process of the sandbox uid, which all sessions
        share: at ``nproc``, one session's processes would make every other session's bwrap
        fail. Without the pids cgroup, ``nproc`` is the only backstop and it is shared by all
        sessions (and, not as root, with the server's own user).
        """
        sb, cfg = self.sandbox, self.sandbox.cfg
        bwrap = bwrap_argv(
            BwrapMounts(
                bwrap=sb.caps.bwrap or "bwrap",
                seccomp_fd=_SECCOMP_FD if sb.seccomp else None,
                etc=sb.etc,
                runtime=sb.runtime,
                workspace=self.merged,
                env=self.env_dir,
                tmp_bytes=cfg.tmp_mb * 1024 * 1024,
            ),
            command,
            cwd_inside,
        )
        limits = [
            "prlimit",
            f"--cpu={cfg.cpu_time_s}",
            f"--fsize={cfg.file_size_mb * 1024 * 1024}",
            f"--nofile={cfg.open_files}",
            "--core=0",
        ]
        per_session = self.cgroups is not None and "pids" in self.cgroups.dirs
        chain = [*limits, f"--nproc={_nproc_ceiling() if per_session else cfg.nproc}", "--"]
        if sb.caps.root:
            chain += ["setpriv", f"--reuid={cfg.uid}", f"--regid={cfg.gid}", "--clear-groups"]
            chain += ["--"]
        chain += bwrap
        joins = "".join(
            f"echo $$ > {shlex.quote(str(f))} && "
            for f in (self.cgroups.procs_files() if self.cgroups else [])
        )
        with self._stop_lock:  # not between a stop's bump and its write of the epoch file
            epoch = self.stop_epoch if epoch is None else epoch
        check = (
            f"read -r e 2>/dev/null < {shlex.quote(str(self.epoch_file))}; "
            f'[ "$e" = {int(epoch)} ] || kill -9 $$; '
        )
        # The filter reaches bwrap as an inherited descriptor (prlimit and setpriv keep it).
        feed = f" {_SECCOMP_FD}< {shlex.quote(str(sb.seccomp))}" if sb.seccomp else ""
        return ["/bin/sh", "-c", f"{joins}{{ {check}exec {shlex.join(chain)}{feed}; }}"]


def _nproc_ceiling() -> str:
    """The highest RLIMIT_NPROC this process may give (raising the hard limit needs
    CAP_SYS_RESOURCE, which a container's root often lacks)."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return "unlimited" if hard == resource.RLIM_INFINITY else str(hard)


def _same_dir(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _copy_layer(src: Path, dest: Path) -> None:
    """Copy an overlay upper dir, whiteouts (char devices) and xattrs included."""
    copy_tree(src, dest)
