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

A directory copy is made on behalf of whoever owns the source directory, leaving out what
that owner could not read (``materialize.py`` builds the files; this module decides when and
where).

Left out: sharing one budget between processes (each counts its own), and lock files are
never deleted (removing one safely would need a second lock; they are empty files). Longer
than most modules: building, holding, evicting and the start-up scan all take the same locks
(the mutex, per-key locks, flocks) in one order, and they stay in one file where that order
can be read and checked.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cheetah.config import ConfigError
from cheetah.limits import ServerLimits
from cheetah.sandbox.materialize import (
    chown_tree,
    copy_readable_tree,
    disk_bytes,
    git_archive,
    note_skipped,
)
from cheetah.sandbox.protocol import EnvError
from cheetah.sandbox.snapshot import (
    SnapshotError,
    SnapshotSpec,
    UploadWriter,
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
        with self._mutex:
            unpacked = self._unpacked(sha)
        return unpacked or self.upload_path(sha).is_file()

    def _unpacked(self, sha: str) -> bool:
        """Whether ``upload:sha`` is unpacked here (the caller holds ``_mutex``)."""
        key = _upload_snapshot_key(sha)
        return key in self._current or (self.dir / key).is_dir()

    def writer(self, sha: str, max_bytes: int) -> UploadWriter:
        return UploadWriter(self.upload_path(sha), sha, max_bytes)

    def add_upload(self, sha: str) -> None:
        """Count a committed upload in the budget; ``StoreFull`` (and the upload removed)
        when it cannot fit beside what sessions use. Two clients may send the same snapshot
        at once: a session started from the first copy unpacks it and removes the tar, so the
        second finds it gone, which is fine (the snapshot is there, unpacked)."""
        path = self.upload_path(sha)
        key = f"upload-{sha}"
        with self._mutex:
            if path in self._by_path:
                self._by_path[path].last_used = time.monotonic()
                return
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                if self._unpacked(sha):
                    return
                raise
            entry = _Entry(key, path, size, last_used=time.monotonic())
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
            entry.size = disk_bytes(dest)
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
                    note_skipped(src, skipped)
            else:
                tmp.mkdir()
                if spec.kind == "tar":
                    extract_tarball(Path(spec.path), tmp, f"snapshot tarball {spec.path!r}", limits)
                elif spec.kind == "upload":
                    self._unpack_upload(spec.path, tmp, limits)
                else:
                    git_archive(spec, tmp, limits)
            if self.uid is not None and os.geteuid() == 0:
                chown_tree(tmp, self.uid, self.gid if self.gid is not None else self.uid)
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
            entry = _Entry(key, path, disk_bytes(path), last_used=time.monotonic() - 1e6)
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
