"""Task snapshots: a directory, a tarball, or a git repo at a commit, made read-only once.

A snapshot is materialized into ``base_dir/snapshots/<key>`` (copied, extracted or
``git archive``d; owned by the sandbox uid so sessions can change their copy-up
files) and then shared read-only as the lower layer of every session forked from
it. Keys: a directory by its absolute path (read once per process: call
``SnapshotStore.forget`` to re-read it), a tarball by its SHA-256, a git snapshot
by repo path and resolved commit. Superseded generations of a refreshed directory
stay on disk until the base directory is cleaned (live sessions may still use them). Materialization writes to a temporary name and
renames, so a crash never leaves half a snapshot behind.

Tarballs (``tar`` snapshots, uploads, and ``git archive`` output) may be hostile, so
extraction reads them as a stream and checks every member *before* writing it:

- at most ``MAX_EXTRACT_BYTES`` (512 MiB) of uncompressed tarball and of file data, and
  at most ``MAX_MEMBERS`` (100,000) members; ``CHEETAH_SNAPSHOT_MAX_BYTES`` and
  ``CHEETAH_SNAPSHOT_MAX_MEMBERS`` override them (read at each extraction). A gzip bomb
  is refused at the member that would cross the limit, from its header, and a header
  that tarfile reads whole (pax, GNU long name) may hold at most 1 MiB;
- tarfile's ``data`` filter: a leading ``/`` dropped, nothing outside the destination,
  no devices or FIFOs, links only to inside, no owners or set-id bits;
- and, since that filter has been bypassed with long chains of symbolic links
  (CVE-2025-4517, fixed in Python 3.11.13, 3.12.11, 3.13.4): no ``..`` component, no
  member under an earlier symbolic link of the archive (so nothing it creates can
  redirect a later write), no name twice, hard links only to regular files earlier in
  the archive.

The stream is read to its end, so a compressed tarball's checksum is checked too. A
refused or broken tarball raises ``SnapshotError`` naming the member or the limit, and
nothing of it stays on disk. Uploads arrive through ``UploadWriter``: written to a
temporary file beside their final name while hashed and counted, then checked against
their sha256 and renamed into place. Longer than most modules because every check on
hostile archives stays in one place to be audited together with the extraction it guards.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel

from cheetah.sandbox.protocol import EnvError

MAX_EXTRACT_BYTES = 512 << 20  # uncompressed tarball, and file data written, per snapshot
MAX_MEMBERS = 100_000  # members of one tarball
MAX_HEADER_BYTES = 1 << 20  # one pax or GNU long-name header (tarfile reads it whole)
_TRAILER_BYTES = 64 << 10  # end-of-archive blocks and record padding past the last member
_HEADER_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class SnapshotError(ValueError):
    """The snapshot cannot be made: missing path, bad or hostile tarball, unknown commit."""


class SnapshotSpec(BaseModel):
    kind: Literal["dir", "tar", "git"]
    path: str
    commit: str | None = None

    @classmethod
    def parse(cls, text: str) -> SnapshotSpec:
        """``dir:PATH``, ``tar:PATH``, ``git:PATH@COMMIT``, or a bare path (kind guessed)."""
        kind, sep, rest = text.partition(":")
        if sep and kind in ("dir", "tar", "git"):
            if kind == "git":
                path, _, commit = rest.rpartition("@")
                if not path:
                    raise SnapshotError(f"git snapshot {text!r} needs PATH@COMMIT")
                return cls(kind="git", path=path, commit=commit)
            return cls(kind=kind, path=rest)  # type: ignore[arg-type]
        p = Path(text)
        if p.is_file() and tarfile.is_tarfile(p):
            return cls(kind="tar", path=text)
        return cls(kind="dir", path=text)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
    os.chown(root, uid, gid)


def env_limit(name: str, default: int) -> int:
    """A positive whole number from the environment variable ``name``, else ``default``;
    ValueError naming the variable when it is set to anything else."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={text!r} is not a positive whole number")
    return value


def _env_limit(name: str, default: int) -> int:
    try:
        return env_limit(name, default)
    except ValueError as e:
        raise SnapshotError(str(e)) from None


def extract_limits() -> tuple[int, int]:
    """(bytes, members) one tarball may expand to: ``MAX_EXTRACT_BYTES`` and ``MAX_MEMBERS``,
    or ``CHEETAH_SNAPSHOT_MAX_BYTES`` and ``CHEETAH_SNAPSHOT_MAX_MEMBERS`` where set."""
    return (
        _env_limit("CHEETAH_SNAPSHOT_MAX_BYTES", MAX_EXTRACT_BYTES),
        _env_limit("CHEETAH_SNAPSHOT_MAX_MEMBERS", MAX_MEMBERS),
    )


class _Refused(Exception):
    """A tarball broke a rule; the caller names the tarball."""


def _over_bytes(limit: int) -> _Refused:
    return _Refused(
        f"it expands to over {limit} bytes (the extraction limit, CHEETAH_SNAPSHOT_MAX_BYTES)"
    )


class _Budget:
    """The uncompressed tar stream, refused once it runs past ``limit`` bytes."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream, self.limit, self.read_bytes = stream, limit, 0

    def read(self, size: int) -> bytes:
        data = self.stream.read(size)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit + _TRAILER_BYTES:
            raise _over_bytes(self.limit)
        return data


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses a header that tarfile would read into memory whole before it is parsed."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise _Refused(f"a tar header of {self.size} bytes is over {MAX_HEADER_BYTES}")
        return super()._proc_member(tarfile_)


def _decompressed(fh: IO[bytes]) -> IO[bytes]:
    magic = fh.read(6)
    fh.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=fh, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(fh)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(fh)
    return fh


def _parts(path: str, member: str) -> list[str]:
    parts = [p for p in path.lstrip("/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"member {member!r} has a '..' in {path!r}")
    return parts


def _checked(tf: tarfile.TarFile, max_bytes: int, max_members: int) -> Iterator[tarfile.TarInfo]:
    """The members of ``tf``, each checked against the limits and rules before it is
    extracted (tarfile writes a member only after this generator yields it)."""
    written = 0
    links: set[str] = set()  # symbolic links the archive made
    files: set[str] = set()  # regular files (and hard links to them)
    dirs: set[str] = set()
    for count, m in enumerate(tf, start=1):
        if count > max_members:
            raise _Refused(
                f"it has over {max_members} members "
                "(the member limit, CHEETAH_SNAPSHOT_MAX_MEMBERS)"
            )
        written += m.size
        if max(written, m.offset_data + m.size) > max_bytes:
            raise _over_bytes(max_bytes)
        parts = _parts(m.name, m.name)
        name = "/".join(parts)
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in links:
                raise _Refused(f"member {m.name!r} lies under a symbolic link of the archive")
        if name in links or name in files or (name in dirs and not m.isdir()):
            raise _Refused(f"member {m.name!r} appears twice")
        if m.issym():
            links.add(name)
        elif m.islnk():
            target = "/".join(_parts(m.linkname, m.name))
            if target not in files:
                raise _Refused(
                    f"member {m.name!r} is a hard link to {m.linkname!r}, "
                    "which is not a regular file earlier in the archive"
                )
            files.add(name)
        elif m.isdir():
            dirs.add(name)
        elif name:
            files.add(name)
        yield m


_FILTER_REASONS: dict[type, str] = {
    tarfile.AbsolutePathError: "has an absolute path",
    tarfile.OutsideDestinationError: "would be extracted outside the snapshot",
    tarfile.SpecialFileError: "is a special file (a device or a FIFO): "
    "only files, directories and links are allowed",
    tarfile.AbsoluteLinkError: "is a link to an absolute path",
    tarfile.LinkOutsideDestinationError: "is a link leading outside the snapshot",
}


def _extract(stream: IO[bytes], dest: Path, what: str) -> None:
    """Extract an uncompressed tar stream into ``dest`` under the limits and rules above."""
    max_bytes, max_members = extract_limits()
    try:
        budget = _Budget(stream, max_bytes)
        with tarfile.open(fileobj=budget, mode="r|", tarinfo=_BoundedTarInfo) as tf:
            tf.extractall(dest, members=_checked(tf, max_bytes, max_members), filter="data")
        while budget.read(1 << 16):  # the rest: padding, and a compressed stream's checksum
            pass
    except _Refused as e:
        raise SnapshotError(f"{what} refused: {e}") from None
    except tarfile.FilterError as e:
        member = getattr(e, "tarinfo", None)
        name = member.name if member is not None else "?"
        reason = _FILTER_REASONS.get(type(e), str(e))
        raise SnapshotError(f"{what} refused: member {name!r} {reason}") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        raise SnapshotError(f"cannot extract {what}: {e}") from None


def extract_tarball(path: Path, dest: Path, what: str | None = None) -> None:
    """Extract the tarball at ``path`` (plain, gzip, bzip2 or xz) into the directory ``dest``
    under the limits and rules above, or raise ``SnapshotError`` naming ``what`` (the
    caller removes ``dest``: part of the tarball may be in it then)."""
    what = what or f"tarball {str(path)!r}"
    try:
        with path.open("rb") as raw:
            _extract(_decompressed(raw), dest, what)
    except OSError as e:
        raise SnapshotError(f"cannot extract {what}: {e}") from None


class UploadWriter:
    """One snapshot tarball being received: written to a temporary file beside ``path``
    while hashed and counted (refused with 413 once over ``max_bytes``), then checked
    against ``sha`` (400) and renamed into place; a writer left without ``commit``
    removes its temporary file. Never holds more than one piece in memory."""

    def __init__(self, path: Path, sha: str, max_bytes: int) -> None:
        self.path, self.sha, self.max_bytes = path, sha, max_bytes
        self.size = 0
        self._hash = hashlib.sha256()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{sha}.", suffix=".part")
        except OSError as e:
            raise _storage_error(e) from None
        self._tmp = Path(tmp)
        self._fh: IO[bytes] | None = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        assert self._fh is not None, "the upload is already committed or discarded"
        self.size += len(data)
        if self.size > self.max_bytes:
            raise EnvError(f"snapshot is over the limit of {self.max_bytes} bytes", 413)
        self._hash.update(data)
        try:
            self._fh.write(data)
        except OSError as e:
            raise _storage_error(e) from None

    def commit(self) -> None:
        assert self._fh is not None, "the upload is already committed or discarded"
        if self._hash.hexdigest() != self.sha:
            raise EnvError("snapshot bytes do not match their sha256", 400)
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
            if self.path.is_file():  # the same bytes are already there
                self._tmp.unlink()
            else:
                os.replace(self._tmp, self.path)
        except OSError as e:
            raise _storage_error(e) from None

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> UploadWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def _storage_error(e: OSError) -> EnvError:
    """507 Insufficient Storage: the server could not keep the upload (a full disk, mostly)."""
    return EnvError(f"cannot store the snapshot: {e.strerror or e}", 507)


class SnapshotStore:
    def __init__(self, base_dir: Path, uid: int | None = None, gid: int | None = None) -> None:
        self.dir = base_dir / "snapshots"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.uid, self.gid = uid, gid
        self._keys: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def key(self, spec: SnapshotSpec) -> str:
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
            ["git", "-C", str(src), "rev-parse", "--verify", f"{spec.commit}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise SnapshotError(f"commit {spec.commit!r} not found in {spec.path!r}")
        return "git-" + hashlib.sha256(f"{src}@{out.stdout.strip()}".encode()).hexdigest()[:20]

    def materialize(self, spec: SnapshotSpec, refresh: bool = False) -> Path:
        """The read-only directory for ``spec``, made on first use (or again on ``refresh``:
        a new generation, since live sessions keep the old one as their lower layer)."""
        cache_key = spec.model_dump_json()
        with self._lock:
            cached = self._keys.get(cache_key)
            if cached is not None and cached.is_dir() and not refresh:
                return cached
            dest = self.dir / self.key(spec)
            if refresh and spec.kind == "dir":
                self._generation += 1
                dest = dest.with_name(f"{dest.name}-g{os.getpid()}-{self._generation}")
            if not dest.is_dir():
                self._build(spec, dest)
            self._keys[cache_key] = dest
            return dest

    def forget(self, spec: SnapshotSpec) -> None:
        with self._lock:
            path = self._keys.pop(spec.model_dump_json(), None)
        if path is not None and path.name.startswith("dir-"):
            shutil.rmtree(path, ignore_errors=True)

    def _build(self, spec: SnapshotSpec, dest: Path) -> None:
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        src = Path(spec.path).expanduser().resolve()
        try:
            if spec.kind == "dir":
                shutil.copytree(src, tmp, symlinks=True)
            elif spec.kind == "tar":
                tmp.mkdir()
                extract_tarball(src, tmp, f"snapshot tarball {spec.path!r}")
            else:
                tmp.mkdir()
                proc = subprocess.Popen(
                    ["git", "-C", str(src), "archive", "--format=tar", spec.commit or "HEAD"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                assert proc.stdout is not None
                try:
                    _extract(
                        proc.stdout, tmp, f"git snapshot {spec.path!r}@{spec.commit or 'HEAD'}"
                    )
                except BaseException:
                    proc.kill()
                    proc.communicate()
                    raise
                _, err = proc.communicate()  # the end-of-archive padding, and stderr
                if proc.returncode != 0:
                    raise SnapshotError(f"git archive failed: {err.decode(errors='replace')[:300]}")
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
