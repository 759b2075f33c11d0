"""The isolated backend: bubblewrap sessions over an overlayfs layer of a read-only snapshot.

Per session on the host (``base_dir/sessions/<id>``):

- ``layer/``: a tmpfs of ``disk_mb`` holding the overlay ``upper`` and ``work`` dirs,
  so a session's changes are capped in size and a reset is an unmount;
- ``merged/``: the overlay of ``upper`` on the snapshot; file tools act here (after
  ``resolve_path``), commands see it as ``/workspace``.

Each command runs as ``sh`` (root) joining the session's cgroups -> ``prlimit``
(CPU time, file size, processes, open files) -> ``setpriv`` to the sandbox uid ->
``bwrap`` with new user, pid, net, ipc, uts and cgroup namespaces, read-only
``/usr`` and interpreter, a private ``/tmp`` and ``/dev``, ``/proc/sys`` read-only,
no network but loopback. Close kills every process in the session's cgroups and
unmounts. Without root there is no overlay (the session is a copy) and no cgroup,
and bwrap runs as the calling user; ``capabilities.detect`` says which applies.

Deliberately left out: seccomp filters, a full VM (no guest boots on these hosts).
Known gap: host-side file tools check paths and then open them; a command running
concurrently in the same session could swap a path component for a symlink in
between. Commands cannot see the host, so the race can only expose files that the
host process can read and a symlink can name.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import os
import shlex
import shutil
import stat
import sys
import uuid
from pathlib import Path

from cheetah.sandbox import mounts
from cheetah.sandbox.capabilities import Capabilities, detect
from cheetah.sandbox.cgroups import SessionCgroups
from cheetah.sandbox.config import SandboxConfig
from cheetah.sandbox.snapshot import SnapshotSpec, SnapshotStore
from cheetah.sandbox.workspace import ExecResult, resolve_path, run_process

WORKSPACE = "/workspace"


class SandboxUnavailable(RuntimeError):
    """This host cannot isolate commands; nothing runs unsandboxed instead."""


def _runtime_dirs() -> list[Path]:
    """The interpreter and its environment, visible read-only inside (tests and ruff need them)."""
    dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return sorted(d for d in dirs if d != Path("/usr"))


class Sandbox:
    """Host-level state shared by sessions: config, capabilities, snapshots, runtime mounts."""

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self.caps: Capabilities = detect(self.cfg.uid, self.cfg.gid)
        if not self.caps.isolated:
            raise SandboxUnavailable(self.caps.describe())
        base = self.cfg.base_dir
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o711)
        owner = (self.cfg.uid, self.cfg.gid) if self.caps.root else (None, None)
        self.snapshots = SnapshotStore(base, *owner)
        os.chmod(self.snapshots.dir, 0o711)
        self.sessions_dir = base / "sessions"
        self.sessions_dir.mkdir(exist_ok=True)
        os.chmod(self.sessions_dir, 0o711)
        self.etc = self._write_etc(base / "etc")
        self.runtime = self._mount_runtime(base / "runtime")

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
        are bind-mounted read-only under ``base`` first, so the sandbox uid can reach them."""
        pairs = []
        for d in _runtime_dirs():
            if not self.caps.root:
                pairs.append((d, d))
                continue
            # Named by the source, so interpreters of other checkouts never collide.
            target = base / hashlib.sha256(str(d).encode()).hexdigest()[:16]
            if mounts.is_mounted(target) and not _same_dir(target, d):
                mounts.umount(target, lazy=True)  # left by a deleted and re-made checkout
            if not mounts.is_mounted(target):
                mounts.bind_readonly(d, target)
            os.chmod(base, 0o711)
            pairs.append((target, d))
        return pairs

    def describe(self) -> str:
        return self.caps.describe()

    async def create(
        self, spec: SnapshotSpec, session_id: str | None = None, refresh: bool = False
    ) -> IsolatedSession:
        lower = await asyncio.to_thread(self.snapshots.materialize, spec, refresh)
        session = IsolatedSession(self, lower, session_id or uuid.uuid4().hex[:12])
        await asyncio.to_thread(session.setup)
        return session


class IsolatedSession:
    """One sandboxed workspace. Implements the ``Workspace`` protocol."""

    def __init__(self, sandbox: Sandbox, lower: Path, session_id: str) -> None:
        self.sandbox, self.lower, self.id = sandbox, lower, session_id
        self.dir = sandbox.sessions_dir / session_id
        self.layer = self.dir / "layer"
        self.merged = self.dir / "merged"
        self.cgroups: SessionCgroups | None = None
        self.closed = False

    # -- Workspace protocol -------------------------------------------------
    @property
    def root(self) -> Path:
        return self.merged

    async def exec(
        self, command: str, *, timeout_s: float, cwd: str = ".", output_limit: int = 16_000
    ) -> ExecResult:
        if self.closed:
            raise RuntimeError(f"session {self.id} is closed")
        workdir = resolve_path(self.merged, cwd, must_exist=True)
        inside = WORKSPACE + "/" + workdir.relative_to(self.merged.resolve()).as_posix()
        argv = self._argv(command, inside.rstrip("/.") or WORKSPACE)
        return await run_process(
            argv,
            cwd=self.dir,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env={"PATH": "/usr/bin:/bin"},
        )

    # -- lifecycle -------------------------------------------------------------
    def setup(self, copy_from: IsolatedSession | None = None) -> None:
        """Directories, cgroups and layers; the files are the snapshot's, or ``copy_from``'s."""
        self.dir.mkdir(mode=0o711)
        caps, cfg = self.sandbox.caps, self.sandbox.cfg
        if caps.cgroups:
            self.cgroups = SessionCgroups(self.id, caps.cgroups, cfg)
        if caps.overlay:
            self.merged.mkdir()
            self.layer.mkdir()
            self._mount_layers(upper_from=copy_from.layer / "upper" if copy_from else None)
        else:
            source = copy_from.merged if copy_from else self.lower
            shutil.copytree(source, self.merged, symlinks=True)

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
            if mounts.is_mounted(target):
                try:
                    mounts.umount(target)
                except OSError:
                    mounts.umount(target, lazy=True)

    def kill_processes(self) -> int:
        return self.cgroups.kill_all() if self.cgroups else 0

    def reset(self) -> None:
        """Back to the snapshot: processes killed, changes dropped."""
        self.kill_processes()
        if self.sandbox.caps.overlay:
            self._unmount_layers()
            self._mount_layers()
        else:
            shutil.rmtree(self.merged)
            shutil.copytree(self.lower, self.merged, symlinks=True)

    def fork(self, new_id: str | None = None) -> IsolatedSession:
        """A new session starting from this one's current files."""
        child = IsolatedSession(self.sandbox, self.lower, new_id or uuid.uuid4().hex[:12])
        child.setup(copy_from=self)
        return child

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.kill_processes()
        self._unmount_layers()
        if self.cgroups:
            self.cgroups.remove()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- diff ------------------------------------------------------------------
    def changed_paths(self) -> list[str]:
        """Workspace-relative paths that differ from the snapshot (added, changed, deleted)."""
        if self.sandbox.caps.overlay:
            candidates = _layer_paths(self.layer / "upper", self.lower)
        else:
            candidates = _tree_files(self.lower) | _tree_files(self.merged)
        return sorted(p for p in candidates if _differs(self.lower / p, self.merged / p))

    def diff(self) -> str:
        """A unified diff (a/ = snapshot, b/ = now), binary files named, not shown."""
        return "".join(file_diff(self.lower / p, self.merged / p, p) for p in self.changed_paths())

    # -- command line ------------------------------------------------------------
    def _argv(self, command: str, cwd_inside: str) -> list[str]:
        sb, cfg = self.sandbox, self.sandbox.cfg
        bwrap = [
            sb.caps.bwrap or "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--cap-drop",
            "ALL",
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
            bwrap += ["--ro-bind", str(sb.etc / name), f"/etc/{name}"]
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
            str(cfg.tmp_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
        ]
        # The interpreter after /tmp, which would otherwise hide one that lives under /tmp.
        for source, inside in sb.runtime:
            bwrap += ["--ro-bind", str(source), str(inside)]
        bwrap += [
            "--bind",
            str(self.merged),
            WORKSPACE,
            "--chdir",
            cwd_inside,
            "--clearenv",
            "--setenv",
            "PATH",
            f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
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
            "--setenv",
            "TERM",
            "dumb",
            "--disable-userns",
            "--",
            "/bin/bash",
            "-c",
            command,
        ]
        limits = [
            "prlimit",
            f"--cpu={cfg.cpu_time_s}",
            f"--fsize={cfg.file_size_mb * 1024 * 1024}",
            f"--nofile={cfg.open_files}",
            "--core=0",
        ]
        if not sb.caps.root:
            return [*limits, f"--nproc={cfg.nproc}", "--", *bwrap]
        drop = ["setpriv", f"--reuid={cfg.uid}", f"--regid={cfg.gid}", "--clear-groups", "--"]
        chain = [*limits, f"--nproc={cfg.nproc}", "--", *drop, *bwrap]
        joins = "".join(
            f"echo $$ > {shlex.quote(str(f))} && "
            for f in (self.cgroups.procs_files() if self.cgroups else [])
        )
        return ["/bin/sh", "-c", f"{joins}exec {shlex.join(chain)}"]


def _same_dir(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _copy_layer(src: Path, dest: Path) -> None:
    """Copy an overlay upper dir, whiteouts (char devices) and xattrs included."""
    import subprocess

    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _tree_files(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def _layer_paths(upper: Path, lower: Path) -> set[str]:
    """Paths an overlay upper layer touches: its files, whiteouts, and what opaque dirs hide."""
    out = set()
    for dirpath, dirs, files in os.walk(upper):
        rel_dir = os.path.relpath(dirpath, upper)
        try:
            opaque = os.getxattr(dirpath, "trusted.overlay.opaque") == b"y"
        except OSError:
            opaque = False
        if opaque and rel_dir != ".":
            out |= {os.path.join(rel_dir, f) for f in _tree_files(lower / rel_dir)}
        for name in [*files, *dirs]:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(os.path.join(dirpath, name))
            if _is_whiteout(st):
                if (lower / rel).is_dir():
                    out |= {os.path.join(rel, f) for f in _tree_files(lower / rel)}
                else:
                    out.add(rel)
            elif not stat.S_ISDIR(st.st_mode):
                out.add(rel)
    return out


def _read(path: Path) -> bytes | None:
    try:
        if path.is_symlink():
            return b"symlink -> " + os.readlink(path).encode()
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


def _differs(a: Path, b: Path) -> bool:
    return _read(a) != _read(b)


def file_diff(before_path: Path, after_path: Path, name: str) -> str:
    """One file's unified diff, git-style headers; binary files are named only."""
    before, after = _read(before_path), _read(after_path)
    if before == after:
        return ""
    a = f"a/{name}" if before is not None else "/dev/null"
    b = f"b/{name}" if after is not None else "/dev/null"
    head = f"diff --git a/{name} b/{name}\n"
    try:
        old = (before or b"").decode("utf-8")
        new = (after or b"").decode("utf-8")
    except UnicodeDecodeError:
        return f"{head}Binary files {a} and {b} differ\n"
    if "\x00" in old or "\x00" in new:
        return f"{head}Binary files {a} and {b} differ\n"
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b)
    body = "".join(
        ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines
    )
    return head + body
