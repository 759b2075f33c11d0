"""`SnapshotStore`: the snapshots and uploads a server keeps on disk, within a byte budget.

A snapshot is materialized once into ``base_dir/snapshots/<key>`` (copied, extracted or
``git archive``d by ``snapshot.py``; owned by the sandbox uid so sessions can change their
copy-up files) and shared read-only as the lower layer of every session made from it.
Keys: a directory by its absolute path (read once per store: ``refresh`` reads it again
into a new generation), a tarball or an upload by its SHA-256, a git snapshot by repo
path and resolved commit. Building writes to a temporary name and renames, so a crash
never leaves half a snapshot behind.

Sessions ``acquire`` a snapshot and ``release`` it when they close. What the store holds
(snapshots and uploads not yet unpacked) is kept under ``budget_bytes`` (the limit
``snapshot_store_bytes``): past it, the least recently used entries that no session uses
are removed; a new entry that cannot fit even then is refused (``StoreFull``, 507). An
upload is removed once unpacked (the snapshot is what sessions use); a refreshed
directory's old generation goes once its last session closes. Each key has its own lock,
so one slow build (a big upload being unpacked) never holds up creates from other
snapshots.

Several servers may share a base dir. A process holds a shared ``flock`` on an entry's
lock file (``snapshot-locks/<key>``) while any of its sessions uses the entry, and
removes an entry only under an exclusive one (taken without waiting), after renaming it
out of the way; a process that finds an entry gone after taking its shared lock builds it
again. Each process counts only the entries it built or found at start.

A directory copy is made on behalf of whoever owns the source directory: as root, an
entry that owner could not read by its mode bits (a root-only file, say) is left out of
the copy, so a sandbox user never reads what the source's owner could not. Paths under
the source are opened by descriptor without following links, so a swap while copying
cannot lead elsewhere.

Left out: sharing one budget between processes (each counts its own), and lock files are
never deleted (removing one safely would need a second lock; they are empty files).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cheetah.config import ConfigError
from cheetah.limits import ServerLimits
from cheetah.sandbox.protocol import EnvError
from cheetah.sandbox.snapshot import (
    SnapshotError,
    SnapshotSpec,
    UploadWriter,
    extract_stream,
    extract_tarball,
)

_TMP = ".tmp-"
_TRASH = ".trash-"


class StoreFull(EnvError):
    """What is in use already fills the budget; nothing unused is left to remove."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 507)


@dataclass
class _Entry:
    key: str  # the lock file's name, and the snapshot dir's (generations aside)
    path: Path
    size: int
    refs: int = 0
    last_used: float = 0.0
    lock_fd: int | None = None
    retired: bool = False  # replaced by a refresh: removed once unused


class SnapshotStore:
    def __init__(
        self,
        base_dir: Path,
        uid: int | None = None,
        gid: int | None = None,
        *,
        limits: ServerLimits | None = None,
    ) -> None:
        self.dir = base_dir / "snapshots"
        self.uploads = base_dir / "uploads"
        self.meta = base_dir / "snapshot-locks"
        for d in (self.dir, self.uploads, self.meta):
            d.mkdir(parents=True, exist_ok=True)
        self.uid, self.gid = uid, gid
        self.limits = limits  # None: read from the environment at each use
        self.budget_bytes = (limits or ServerLimits.load()).snapshot_store_bytes
        self._mutex = threading.Lock()  # the tables below; never held while building
        self._key_locks: dict[str, threading.Lock] = {}
        self._current: dict[str, _Entry] = {}  # key -> the entry sessions get now
        self._by_path: dict[Path, _Entry] = {}  # every entry on disk, retired ones too
        self._spec_keys: dict[str, str] = {}  # a spec's JSON -> its key (no re-hashing)
        self._generation = 0
        self._scan()

    # -- public ---------------------------------------------------------------------------
    def acquire(self, spec: SnapshotSpec, refresh: bool = False) -> Path:
        """The read-only directory of ``spec``, made on first use (or again on ``refresh``
        of a directory), held for a session until ``release``."""
        key = self.key(spec)
        with self._lock_for(key):
            stale = None
            with self._mutex:
                entry = self._current.get(key)
                if entry is not None and refresh and spec.kind == "dir":
                    stale = self._retire(entry)
                    entry = None
            if stale is not None:
                self._remove(stale)
            if entry is not None:
                self._retain(entry)
                if entry.path.is_dir():
                    return entry.path
                self.release(entry.path)  # removed by another server: build it again
                with self._mutex:
                    self._forget(entry)
            entry = self._build_entry(spec, key, fresh=refresh and spec.kind == "dir")
        self._evict()
        return entry.path

    def materialize(self, spec: SnapshotSpec, refresh: bool = False) -> Path:
        """``acquire`` without holding: the snapshot may be removed to make room later."""
        path = self.acquire(spec, refresh)
        self.release(path)
        return path

    def retain(self, path: Path) -> None:
        """One more session uses the snapshot at ``path`` (a fork of one that does)."""
        with self._mutex:
            entry = self._by_path[path]
        self._retain(entry)

    def release(self, path: Path) -> None:
        with self._mutex:
            entry = self._by_path.get(path)
            if entry is None or entry.refs == 0:
                return
            entry.refs -= 1
            entry.last_used = time.monotonic()
            if entry.refs == 0 and entry.lock_fd is not None:
                os.close(entry.lock_fd)  # drops the shared lock
                entry.lock_fd = None
            gone = entry.refs == 0 and entry.retired
        if gone:
            self._remove(entry)
        self._evict()

    def upload_path(self, sha: str) -> Path:
        return self.uploads / f"{sha}.tar"

    def has_upload(self, sha: str) -> bool:
        """Whether ``upload:sha`` can start a session here (kept, or already unpacked)."""
        key = _upload_snapshot_key(sha)
        with self._mutex:
            unpacked = key in self._current
        return unpacked or (self.dir / key).is_dir() or self.upload_path(sha).is_file()

    def writer(self, sha: str, max_bytes: int) -> UploadWriter:
        return UploadWriter(self.upload_path(sha), sha, max_bytes)

    def add_upload(self, sha: str) -> None:
        """Count a committed upload in the budget; ``StoreFull`` (and the upload removed)
        when it cannot fit beside what sessions use."""
        path = self.upload_path(sha)
        key = f"upload-{sha}"
        with self._mutex:
            if path in self._by_path:
                self._by_path[path].last_used = time.monotonic()
                return
            entry = _Entry(key, path, path.stat().st_size, last_used=time.monotonic())
            self._add(entry)
        self._fit(entry)

    def used_bytes(self) -> int:
        with self._mutex:
            return sum(e.size for e in self._by_path.values())

    # -- keys -----------------------------------------------------------------------------
    def key(self, spec: SnapshotSpec) -> str:
        cache = spec.model_dump_json()
        with self._mutex:
            known = self._spec_keys.get(cache)
        if known is not None:
            return known
        key = _key(spec)
        with self._mutex:
            self._spec_keys[cache] = key
        return key

    def _lock_for(self, key: str) -> threading.Lock:
        with self._mutex:
            return self._key_locks.setdefault(key, threading.Lock())

    # -- building ---------------------------------------------------------------------------
    def _build_entry(self, spec: SnapshotSpec, key: str, fresh: bool) -> _Entry:
        dest = self.dir / key
        if fresh:
            with self._mutex:
                self._generation += 1
                dest = self.dir / f"{key}-g{os.getpid()}-{self._generation}"
        entry = _Entry(key, dest, 0, last_used=time.monotonic())
        self._retain(entry)  # before looking: a server removing it holds the lock alone
        try:
            if not dest.is_dir():
                self._build(spec, dest)
            entry.size = _disk_bytes(dest)
        except BaseException:
            self._drop_lock(entry)
            raise
        with self._mutex:
            self._add(entry)
            self._current[key] = entry
        if spec.kind == "upload":
            self._discard_upload(spec.path)
        try:
            self._fit(entry)
        except StoreFull:
            with self._mutex:
                self._retire(entry)
            self.release(entry.path)  # the last holder: it goes now
            raise
        return entry

    def _build(self, spec: SnapshotSpec, dest: Path) -> None:
        tmp = self.dir / f"{_TMP}{dest.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            limits = self.limits or ServerLimits.load()
        except ConfigError as e:  # a bad CHEETAH_SNAPSHOT_* set since the store started
            raise SnapshotError(str(e)) from None
        try:
            if spec.kind == "dir":
                src = Path(spec.path).expanduser().resolve()
                skipped = copy_readable_tree(src, tmp, limits)
                if skipped:
                    _note_skipped(src, skipped)
            else:
                tmp.mkdir()
                if spec.kind == "tar":
                    extract_tarball(Path(spec.path), tmp, f"snapshot tarball {spec.path!r}", limits)
                elif spec.kind == "upload":
                    self._unpack_upload(spec.path, tmp, limits)
                else:
                    _git_archive(spec, tmp, limits)
            if self.uid is not None and os.geteuid() == 0:
                _chown_tree(tmp, self.uid, self.gid if self.gid is not None else self.uid)
            os.chmod(tmp, 0o755)
            try:
                tmp.rename(dest)
            except OSError:
                if not dest.is_dir():  # else another process built the same snapshot first
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _unpack_upload(self, sha: str, dest: Path, limits: ServerLimits) -> None:
        path = self.upload_path(sha)
        if not path.is_file():
            raise EnvError(f"snapshot upload:{sha} was never uploaded here (PUT it first)", 404)
        try:
            extract_tarball(path, dest, f"snapshot upload:{sha}", limits)
        except SnapshotError:
            self._discard_upload(sha)  # it can never be unpacked: keep no copy of it
            raise

    def _discard_upload(self, sha: str) -> None:
        path = self.upload_path(sha)
        with self._mutex:
            self._by_path.pop(path, None)
        with self._alone(f"upload-{sha}") as alone:
            if alone:
                path.unlink(missing_ok=True)

    # -- holding and removing ---------------------------------------------------------------
    def _retain(self, entry: _Entry) -> None:
        with self._mutex:
            entry.refs += 1
            entry.last_used = time.monotonic()
            if entry.lock_fd is not None:
                return
            fd = os.open(self.meta / entry.key, os.O_RDWR | os.O_CREAT, 0o600)
            entry.lock_fd = fd
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while another server renames it away

    def _drop_lock(self, entry: _Entry) -> None:
        with self._mutex:
            entry.refs = 0
            if entry.lock_fd is not None:
                os.close(entry.lock_fd)
                entry.lock_fd = None

    def _add(self, entry: _Entry) -> None:
        self._by_path[entry.path] = entry

    def _forget(self, entry: _Entry) -> None:
        self._by_path.pop(entry.path, None)
        if self._current.get(entry.key) is entry:
            del self._current[entry.key]

    def _retire(self, entry: _Entry) -> _Entry | None:
        """Under the mutex: no new session gets ``entry``; it goes when its last one closes
        (``release``), or now: returned when unused, for the caller to remove unlocked."""
        entry.retired = True
        if self._current.get(entry.key) is entry:
            del self._current[entry.key]
        return entry if entry.refs == 0 else None

    @contextlib.contextmanager
    def _alone(self, key: str) -> Iterator[bool]:
        """Whether no process holds ``key``; while the block runs with True, none can take
        it (an exclusive lock, taken without waiting and held for the block)."""
        fd = os.open(self.meta / key, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
            yield alone
        finally:
            os.close(fd)  # a server that looks after this finds what the block left

    def _remove(self, entry: _Entry) -> bool:
        """Delete ``entry`` from disk unless a process holds it; whether it went."""
        with self._alone(entry.key) as alone:
            if not alone:
                return False
            with self._mutex:
                if entry.refs:  # taken again meanwhile, in this process
                    return False
                self._forget(entry)
            trash = self._take_away(entry.path)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        return True

    def _take_away(self, path: Path) -> Path | None:
        """Under the entry's exclusive lock: a file unlinked, a directory renamed out of the
        way (returned, for the caller to delete unlocked)."""
        if not path.is_dir():
            path.unlink(missing_ok=True)
            return None
        trash = self.dir / f"{_TRASH}{path.name}-{uuid.uuid4().hex[:8]}"
        try:
            path.rename(trash)
        except OSError:
            return None
        return trash

    def _evict(self, keep: _Entry | None = None) -> int:
        """Remove the least recently used unused entries while over budget; bytes left."""
        with self._mutex:
            total = sum(e.size for e in self._by_path.values())
            idle = sorted(
                (e for e in self._by_path.values() if e.refs == 0 and e is not keep),
                key=lambda e: e.last_used,
            )
        for entry in idle:
            if total <= self.budget_bytes:
                break
            if self._remove(entry):
                total -= entry.size
        return total

    def _fit(self, entry: _Entry) -> None:
        total = self._evict(keep=entry)
        if total > self.budget_bytes:
            if entry.refs == 0:
                self._remove(entry)
            raise StoreFull(
                f"the snapshot store is full: {total} bytes with this snapshot "
                f"({entry.size}), over its budget of {self.budget_bytes} bytes "
                "(snapshot_store_bytes), and what is there is in use by live sessions"
            )

    # -- start ------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Take stock of what earlier servers left: finished entries are kept (counted in
        the budget), partial builds and directory snapshots no live server holds go (a
        directory is read once per store)."""
        for item in sorted(os.scandir(self.dir), key=lambda e: e.name):
            if not item.is_dir(follow_symlinks=False):
                continue
            path, key = Path(item.path), _entry_key(item.name)
            if item.name.startswith((_TMP, _TRASH)) or ".tmp" in item.name:  # partial
                if not (item.name.startswith(_TMP) and _builder_alive(item.name)):
                    shutil.rmtree(path, ignore_errors=True)
                continue
            if key.startswith("dir-"):
                with self._alone(key) as alone:
                    trash = self._take_away(path) if alone else None
                if trash is not None:
                    shutil.rmtree(trash, ignore_errors=True)
                continue
            entry = _Entry(key, path, _disk_bytes(path), last_used=time.monotonic() - 1e6)
            self._add(entry)
            self._current[key] = entry
        for item in sorted(os.scandir(self.uploads), key=lambda e: e.name):
            if item.name.endswith(".tar") and item.is_file(follow_symlinks=False):
                sha = item.name[: -len(".tar")]
                entry = _Entry(f"upload-{sha}", Path(item.path), item.stat().st_size)
                entry.last_used = time.monotonic() - 1e6
                self._add(entry)
        self._evict()


def _key(spec: SnapshotSpec) -> str:
    if spec.kind == "upload":
        return _upload_snapshot_key(spec.path)
    src = Path(spec.path).expanduser().resolve()
    if spec.kind == "dir":
        if not src.is_dir():
            raise SnapshotError(f"snapshot directory {spec.path!r} does not exist")
        return "dir-" + hashlib.sha256(str(src).encode()).hexdigest()[:20]
    if spec.kind == "tar":
        if not src.is_file():
            raise SnapshotError(f"snapshot tarball {spec.path!r} does not exist")
        return "tar-" + _sha256(src)[:20]
    if not (src / ".git").exists() and not (src / "HEAD").exists():
        raise SnapshotError(f"{spec.path!r} is not a git repository")
    out = subprocess.run(
        [
            "git",
            "-C",
            str(src),
            "rev-parse",
            "--verify",
            "--end-of-options",
            f"{spec.commit}^{{commit}}",
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SnapshotError(f"commit {spec.commit!r} not found in {spec.path!r}")
    return "git-" + hashlib.sha256(f"{src}@{out.stdout.strip()}".encode()).hexdigest()[:20]


def _upload_snapshot_key(sha: str) -> str:
    return "tar-" + sha[:20]  # the same key a tar: snapshot of the same bytes gets


def _entry_key(name: str) -> str:
    """The key of a snapshot dir: its name without a refresh's ``-g<pid>-<n>``."""
    head, sep, _ = name.partition("-g")
    return head if sep and name.startswith("dir-") else name


def _builder_alive(name: str) -> bool:
    """Whether the process that is building ``.tmp-<key>-<pid>-<rand>`` still lives."""
    try:
        pid = int(name.rsplit("-", 2)[-2])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _git_archive(spec: SnapshotSpec, dest: Path, limits: ServerLimits) -> None:
    src = Path(spec.path).expanduser().resolve()
    proc = subprocess.Popen(
        [
            "git",
            "-C",
            str(src),
            "archive",
            "--format=tar",
            "--end-of-options",
            spec.commit or "HEAD",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        extract_stream(
            proc.stdout, dest, f"git snapshot {spec.path!r}@{spec.commit or 'HEAD'}", limits
        )
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    _, err = proc.communicate()  # the end-of-archive padding, and stderr
    if proc.returncode != 0:
        raise SnapshotError(f"git archive failed: {err.decode(errors='replace')[:300]}")


def _disk_bytes(root: Path) -> int:
    """Disk blocks under ``root`` (a file's size when it is one), links not followed."""
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total, stack = st.st_blocks * 512, [str(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
    return total


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
    os.chown(root, uid, gid)


# -- copying a directory on behalf of its owner ---------------------------------------------
class _Reader:
    """Who a copy is made for: the owner of the source directory, by its mode bits."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        try:
            user = pwd.getpwuid(uid)
            self.gids = set(os.getgrouplist(user.pw_name, user.pw_gid))
        except KeyError:
            self.gids = set()
        self.gids |= {g.gr_gid for g in grp.getgrall() if str(uid) in g.gr_mem}

    def can(self, st: os.stat_result, need: int) -> bool:
        """``need``: 4 read, 5 read and enter."""
        if self.uid == 0:
            return True
        if st.st_uid == self.uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid in self.gids:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        return bits & need == need


def copy_readable_tree(src: Path, dest: Path, limits: ServerLimits) -> list[str]:
    """Copy the directory ``src`` to ``dest`` (which must not exist): directories, regular
    files and symbolic links (as links), bounded like a tarball (``snapshot_max_bytes`` of
    files, ``snapshot_max_members`` entries, ``snapshot_max_depth`` levels: SnapshotError).
    As root, what the owner of ``src`` could not read is left out; returns those paths.
    Every entry is opened by descriptor below ``src`` without following links, and a file's
    readability is checked again on what was opened."""
    top = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    euid = os.geteuid()
    reader = _Reader(os.fstat(top).st_uid if euid == 0 else euid)
    budget = _CopyBudget(src, limits)
    skipped: list[str] = []
    os.mkdir(dest, 0o700)
    modes: list[tuple[Path, int]] = [(dest, 0o755)]  # set last: a 0555 dir must fill first
    stack: list[tuple[int, Path, str, int]] = [(top, dest, "", 0)]
    try:
        while stack:
            fd, out, rel, depth = stack.pop()
            try:
                for name in sorted(os.listdir(fd)):
                    child = f"{rel}/{name}" if rel else name
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        budget.entry(child)
                        os.symlink(os.readlink(name, dir_fd=fd), out / name)
                    elif stat.S_ISDIR(st.st_mode):
                        if not reader.can(st, 5):
                            skipped.append(child + "/")
                            continue
                        budget.entry(child, depth + 1)
                        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        (out / name).mkdir(mode=0o700)
                        modes.append((out / name, stat.S_IMODE(st.st_mode) & 0o777))
                        stack.append((sub, out / name, child, depth + 1))
                    elif stat.S_ISREG(st.st_mode):
                        budget.entry(child)
                        if not _copy_file(fd, name, out / name, reader, budget):
                            skipped.append(child)
            finally:
                os.close(fd)
    except BaseException:
        for fd, *_ in stack:
            os.close(fd)
        raise
    for path, mode in reversed(modes):
        os.chmod(path, mode)
    return skipped


class _CopyBudget:
    """What a directory copy has used of the snapshot limits; SnapshotError past one."""

    def __init__(self, src: Path, limits: ServerLimits) -> None:
        self.src, self.limits = src, limits
        self.entries = self.bytes = 0

    def entry(self, rel: str, depth: int = 0) -> None:
        self.entries += 1
        if self.entries > self.limits.snapshot_max_members:
            self._refuse(
                f"holds over {self.limits.snapshot_max_members} entries (snapshot_max_members)"
            )
        if depth > self.limits.snapshot_max_depth:
            self._refuse(
                f"is deeper than {self.limits.snapshot_max_depth} levels at {rel!r} "
                "(snapshot_max_depth)"
            )

    def data(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.limits.snapshot_max_bytes:
            self._refuse(f"holds over {self.limits.snapshot_max_bytes} bytes (snapshot_max_bytes)")

    def _refuse(self, why: str) -> None:
        raise SnapshotError(f"snapshot directory {str(self.src)!r} {why}")


def _copy_file(dir_fd: int, name: str, dest: Path, reader: _Reader, budget: _CopyBudget) -> bool:
    """Copy one regular file; False (nothing written) when what opens is not a regular file
    its owner's reader may read (it was swapped since it was listed)."""
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or not reader.can(st, 4):
            return False
        budget.data(st.st_size)
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with open(src, "rb", closefd=False) as fi, open(out, "wb", closefd=False) as fo:
                shutil.copyfileobj(fi, fo, 1 << 20)
            os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
        finally:
            os.close(out)
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
        return True
    finally:
        os.close(src)


def _note_skipped(src: Path, skipped: list[str]) -> None:
    import logging

    logging.getLogger(__name__).warning(
        "snapshot of %s: %d entries its owner cannot read were left out (%s%s)",
        src,
        len(skipped),
        ", ".join(skipped[:5]),
        ", ..." if len(skipped) > 5 else "",
    )
