"""Snapshot sources and hostile tarballs: what a snapshot is named by, and how a tarball
is unpacked without trusting it.

A snapshot is ``dir:PATH``, ``tar:PATH``, ``git:PATH@COMMIT`` (all on the server) or
``upload:SHA256`` (a tarball a client put earlier); ``store.py`` keeps the unpacked copies.

Tarballs (``tar`` snapshots, uploads, and ``git archive`` output) may be hostile, so
extraction reads them as a stream and checks every member *before* writing it:

- at most ``snapshot_max_bytes`` (512 MiB) of uncompressed tarball and of file data, at
  most ``snapshot_max_members`` (100,000) members, each at most ``snapshot_max_depth``
  (64) directories deep (``cheetah.limits.ServerLimits``; the server's, or read from the
  environment at each extraction). A gzip bomb is refused at the member that would cross
  the limit, from its header, and a header that tarfile reads whole (pax, GNU long name)
  may hold at most 1 MiB;
- tarfile's ``data`` filter: a leading ``/`` dropped, nothing outside the destination,
  no devices or FIFOs, links only to inside, no owners or set-id bits;
- and, since that filter has been bypassed with long chains of symbolic links
  (CVE-2025-4517, fixed in Python 3.11.13, 3.12.11, 3.13.4): no ``..`` component, no
  member under an earlier symbolic link of the archive (so nothing it creates can
  redirect a later write), no name twice, hard links only to regular files earlier in
  the archive.

The stream is read to its end, so a compressed tarball's checksum is checked too. A
refused or broken tarball raises ``SnapshotError`` naming the member or the limit (the
caller removes what was written). Uploads arrive through ``UploadWriter``: written to a
temporary file beside their final name while hashed and counted, then checked against
their sha256 and renamed into place. Every check on hostile archives stays in one place,
to be audited together with the extraction it guards.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel

from cheetah.config import ConfigError
from cheetah.limits import ServerLimits
from cheetah.sandbox.protocol import EnvError

MAX_EXTRACT_BYTES = ServerLimits().snapshot_max_bytes  # the defaults, for tests and docs
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


_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./~^-]{0,199}")


class SnapshotSpec(BaseModel):
    kind: Literal["dir", "tar", "git", "upload"]
    path: str  # for an upload, its sha256
    commit: str | None = None

    @classmethod
    def parse(cls, text: str) -> SnapshotSpec:
        """``dir:PATH``, ``tar:PATH``, ``git:PATH@COMMIT``, ``upload:SHA256``, or a bare path
        (kind guessed). A commit is a name or hash (never an option: no leading ``-``)."""
        kind, sep, rest = text.partition(":")
        if sep and kind == "upload":
            if not _SHA256.fullmatch(rest):
                raise SnapshotError(f"snapshot id {rest!r} is not a lowercase hex sha256")
            return cls(kind="upload", path=rest)
        if sep and kind in ("dir", "tar", "git"):
            if kind == "git":
                path, _, commit = rest.rpartition("@")
                if not path:
                    raise SnapshotError(f"git snapshot {text!r} needs PATH@COMMIT")
                if not _COMMIT.fullmatch(commit):
                    raise SnapshotError(f"git snapshot {text!r}: {commit!r} is not a commit name")
                return cls(kind="git", path=path, commit=commit)
            return cls(kind=kind, path=rest)  # type: ignore[arg-type]
        p = Path(text)
        if p.is_file() and tarfile.is_tarfile(p):
            return cls(kind="tar", path=text)
        return cls(kind="dir", path=text)


def extract_limits(limits: ServerLimits | None = None) -> tuple[int, int, int]:
    """(bytes, members, depth) one tarball may expand to: ``limits``' or, without them, the
    defaults overridden by ``CHEETAH_SNAPSHOT_MAX_*`` in the environment now."""
    if limits is None:
        try:
            limits = ServerLimits.load()
        except ConfigError as e:
            raise SnapshotError(str(e)) from None
    return limits.snapshot_max_bytes, limits.snapshot_max_members, limits.snapshot_max_depth


class _Refused(Exception):
    """A tarball broke a rule; the caller names the tarball."""


def _over_bytes(limit: int) -> _Refused:
    return _Refused(
        f"it expands to over {limit} bytes (the extraction limit, snapshot_max_bytes, "
        "CHEETAH_SNAPSHOT_MAX_BYTES)"
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


def _checked(
    tf: tarfile.TarFile, max_bytes: int, max_members: int, max_depth: int
) -> Iterator[tarfile.TarInfo]:
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
                "(the member limit, snapshot_max_members, CHEETAH_SNAPSHOT_MAX_MEMBERS)"
            )
        written += m.size
        if max(written, m.offset_data + m.size) > max_bytes:
            raise _over_bytes(max_bytes)
        parts = _parts(m.name, m.name)
        if len(parts) - (0 if m.isdir() else 1) > max_depth:
            raise _Refused(
                f"member {m.name[:200]!r} lies {len(parts)} levels deep, over {max_depth} "
                "(the depth limit, snapshot_max_depth, CHEETAH_SNAPSHOT_MAX_DEPTH)"
            )
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


def extract_stream(
    stream: IO[bytes], dest: Path, what: str, limits: ServerLimits | None = None
) -> None:
    """Extract an uncompressed tar stream into ``dest`` under the limits and rules above."""
    max_bytes, max_members, max_depth = extract_limits(limits)
    try:
        budget = _Budget(stream, max_bytes)
        with tarfile.open(fileobj=budget, mode="r|", tarinfo=_BoundedTarInfo) as tf:
            members = _checked(tf, max_bytes, max_members, max_depth)
            tf.extractall(dest, members=members, filter="data")
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


def extract_tarball(
    path: Path, dest: Path, what: str | None = None, limits: ServerLimits | None = None
) -> None:
    """Extract the tarball at ``path`` (plain, gzip, bzip2 or xz) into the directory ``dest``
    under the limits and rules above, or raise ``SnapshotError`` naming ``what`` (the
    caller removes ``dest``: part of the tarball may be in it then)."""
    what = what or f"tarball {str(path)!r}"
    try:
        with path.open("rb") as raw:
            extract_stream(_decompressed(raw), dest, what, limits)
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
            raise EnvError(
                f"snapshot is over the limit of {self.max_bytes} bytes (env_max_upload_bytes)", 413
            )
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
