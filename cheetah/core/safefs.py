"""`SafeRoot`: the host's only way into a workspace's files, by descriptor and never by path.

Everything the host does with a session's files (the file tools, the diff, grading's
tree reads and writes, the files API) goes through here, because the session's own
commands can rename, swap and replace anything under its root at any moment, and the
host acts as root. Checking a path and then opening it is a race the session wins
(a directory swapped for a symlink to ``/`` between the two), so nothing here checks
first: every access opens from a descriptor of the root and lets the kernel refuse.

- **Resolution**: ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV``: no symlink is followed anywhere on the
  way, nothing leaves the root, no mount is crossed. Where the kernel lacks openat2
  (before 5.6), one component at a time from the root descriptor with ``O_NOFOLLOW``
  (and ``O_DIRECTORY`` for the directories on the way), which refuses a link at every
  step. ``..`` is refused lexically; the session cannot move anything we hold out of
  its workspace (its only writable mounts are the workspace and its own /tmp).
- **Files**: opened ``O_NONBLOCK | O_NOCTTY | O_NOFOLLOW``, then ``fstat``: only a
  regular file is read (a FIFO, socket or device is refused, never waited on), and
  never more than the caller's byte limit (a sparse file of gigabytes costs its limit).
- **Writes**: the parent directory is resolved as above (missing ones made with
  ``mkdirat`` and owned like their parent via ``fchown`` on the opened descriptor);
  the file is opened ``O_NOFOLLOW`` beside it and must be a regular file; an existing
  file is rewritten in place (owner, mode and hard links kept), a new one is owned
  like its directory, so the sandbox user can change what a tool wrote.
- **Walks**: each directory opened as above, listed from its descriptor; links,
  FIFOs and devices are never entered or read; depth and entry counts are capped.

Why this and not a file service inside the sandbox (a daemon per session, as microVM
sandboxes run): it is as strong for what the host must never do (follow a planted
link, block on a planted FIFO, read past a limit), it costs microseconds per call
instead of a process per call or a daemon per session, and it serves the trusted
local workspace with the same code (``bench/file_tools.py`` compares it with checking
paths, and with a command run in the sandbox; figures in BENCHMARKS.md).

Left out: following links that stay inside the workspace (a link is reported with its
target; read the target). One job, kept whole in one file (hence its length) so that
every host access to session files can be read and audited in one place.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cheetah.core.workspace import JUNK_PARTS, PathError, TreeTooLarge, is_junk

MAX_PATH_CHARS = 4000
MAX_NAME_BYTES = 255
MAX_DEPTH = 64  # directory levels a walk descends
MAX_DIR_ENTRIES = 100_000  # entries one listing reads

_O_PATH = getattr(os, "O_PATH", 0o10000000)
_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 1, 2, 4, 8
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
_SYS_OPENAT2 = 437  # the same number on every architecture (added after the table unification)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class NotFound(PathError):
    """Nothing at the path."""


class NotRegular(PathError):
    """The path names a directory, link, FIFO, socket or device where a regular file is needed."""


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    # The kernel refuses a mode without O_CREAT (EINVAL).
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _libc.syscall(_SYS_OPENAT2, dirfd, path.encode(), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _probe_openat2() -> bool:
    try:
        os.close(_openat2(os.open("/", _O_PATH | os.O_DIRECTORY), ".", _O_PATH | os.O_DIRECTORY))
    except OSError as e:
        return e.errno not in (errno.ENOSYS, errno.EINVAL, errno.E2BIG, errno.EPERM)
    return True


HAVE_OPENAT2 = _probe_openat2()


def split(path: str) -> tuple[str, ...]:
    """An agent-supplied relative path as components ('.' and '' dropped); PathError if unusable."""
    raw = path.strip()
    if not raw:
        raise PathError("empty path; give a path relative to the workspace root, like src/app.py")
    if "\x00" in raw:
        raise PathError(f"path {raw!r} contains a NUL byte")
    if len(raw) > MAX_PATH_CHARS:
        raise PathError(f"path of {len(raw)} characters is too long (at most {MAX_PATH_CHARS})")
    if raw.startswith(("/", "~")):
        raise PathError(
            f"path {raw!r} is absolute; give a path relative to the workspace root, like src/app.py"
        )
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise PathError(f"path {raw!r} leads outside the workspace")
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    for p in parts:
        if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise PathError(f"path {raw!r} has a name over {MAX_NAME_BYTES} bytes")
    return parts


def _why(e: OSError, shown: str) -> PathError:
    """An OSError from resolving or opening ``shown`` as a message the agent can act on."""
    code = e.errno
    if code == errno.ENOENT:
        return NotFound(f"no such file or directory: {shown!r}")
    if code in (errno.ELOOP, errno.EXDEV, errno.EMLINK):
        return NotRegular(
            f"{shown!r} is a symbolic link or passes through one; links are not followed"
        )
    if code == errno.ENOTDIR:
        return NotRegular(
            f"a part of {shown!r} is not a directory (symbolic links are not followed)"
        )
    if code == errno.EISDIR:
        return NotRegular(f"{shown!r} is a directory")
    if code == errno.ENAMETOOLONG:
        return PathError(f"path {shown!r} is too long")
    if code == errno.ENXIO:
        return NotRegular(f"{shown!r} is not a regular file")
    if code == errno.ENOSPC:
        return PathError(f"no space left in the workspace to write {shown!r}")
    if code == errno.EDQUOT:
        return PathError(f"the workspace is over its quota writing {shown!r}")
    return PathError(f"cannot access {shown!r}: {e.strerror}")


def kind_of(mode: int) -> str:
    """'file', 'dir', 'link' or 'other' (FIFO, socket, device)."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


@dataclass(frozen=True)
class Entry:
    """One directory entry as seen without following it."""

    name: str
    kind: str  # file | dir | link | other
    size: int
    mtime_ns: int = 0
    rdev: int = 0  # a device's number (0/0 char devices are overlayfs whiteouts)
    link: str | None = None  # a link's target, never followed


class SafeRoot:
    """A directory tree on this host, reached only by descriptor (see the module docstring).

    Paths are workspace-relative strings as the agent wrote them. Every method raises
    ``PathError`` (``NotFound``, ``NotRegular``) with a message fit for the agent,
    never a bare ``OSError``.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- resolution ----------------------------------------------------------------------
    def _root_fd(self) -> int:
        try:
            return os.open(self.root, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise PathError(f"the workspace root is gone: {e.strerror}") from None

    def _open(self, parts: tuple[str, ...], flags: int, mode: int = 0o644) -> int:
        """Open ``parts`` beneath the root with no link followed; OSError on refusal."""
        root = self._root_fd()
        try:
            if not parts:
                return os.open(".", flags | os.O_CLOEXEC, dir_fd=root)
            if HAVE_OPENAT2:
                return _openat2(root, "/".join(parts), flags, mode)
            cur = root
            try:
                for name in parts[:-1]:
                    nxt = os.open(
                        name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur
                    )
                    if cur != root:
                        os.close(cur)
                    cur = nxt
                return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=cur)
            finally:
                if cur != root:
                    os.close(cur)
        finally:
            os.close(root)

    def _dir_fd(self, parts: tuple[str, ...], shown: str) -> int:
        try:
            return self._open(parts, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as e:
            raise _why(e, shown) from None

    # -- queries -------------------------------------------------------------------------
    def lstat(self, path: str) -> os.stat_result | None:
        """The entry at ``path`` without following it; None if nothing is there."""
        parts = split(path)
        if not parts:
            fd = self._root_fd()
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        try:
            parent = self._dir_fd(parts[:-1], path)
        except NotFound:
            return None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _why(e, path) from None
        finally:
            os.close(parent)

    def kind(self, path: str) -> str | None:
        """'file', 'dir', 'link', 'other', or None when nothing is there."""
        st = self.lstat(path)
        return None if st is None else kind_of(st.st_mode)

    def readlink(self, path: str) -> str:
        parts = split(path)
        parent = self._dir_fd(parts[:-1], path)
        try:
            return os.readlink(parts[-1], dir_fd=parent)
        except OSError as e:
            raise _why(e, path) from None
        finally:
            os.close(parent)

    def getxattr(self, path: str, name: str) -> bytes | None:
        """An extended attribute of the file or directory at ``path`` (None if unset)."""
        parts = split(path) if path.strip() not in ("", ".") else ()
        try:
            fd = self._open(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            return os.getxattr(fd, name)
        except OSError:
            return None
        finally:
            os.close(fd)

    # -- reading -------------------------------------------------------------------------
    def open_regular(self, path: str) -> tuple[int, os.stat_result]:
        """A read descriptor of the regular file at ``path`` and its stat (caller closes)."""
        return self._open_regular(split(path), path)

    def _open_regular(self, parts: tuple[str, ...], shown: str) -> tuple[int, os.stat_result]:
        if not parts:
            raise NotRegular(f"{shown!r} is the workspace root, a directory")
        try:
            fd = self._open(parts, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
        except OSError as e:
            raise _why(e, shown) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise NotRegular(f"{shown!r} is {what}")
        return fd, st

    def read(self, path: str, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the regular file at ``path``, and its size."""
        fd, st = self.open_regular(path)
        try:
            return read_fd(fd, limit), st.st_size
        finally:
            os.close(fd)

    def list(self, path: str = ".") -> list[Entry]:
        """The entries of the directory at ``path`` (unsorted, at most ``MAX_DIR_ENTRIES``)."""
        return self._list(split(path) if path.strip() not in ("", ".") else (), path)

    def _list(self, parts: tuple[str, ...], shown: str) -> list[Entry]:
        try:
            fd = self._open(parts, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            raise _why(e, shown) from None
        out: list[Entry] = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    if len(out) >= MAX_DIR_ENTRIES:
                        break
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue  # removed while listing
                    k = kind_of(st.st_mode)
                    link = None
                    if k == "link":
                        try:
                            link = os.readlink(e.name, dir_fd=fd)
                        except OSError:
                            link = "?"
                    out.append(Entry(e.name, k, st.st_size, st.st_mtime_ns, st.st_rdev, link))
        except OSError as e:
            raise _why(e, shown) from None
        finally:
            os.close(fd)
        return out

    def walk(
        self,
        path: str = ".",
        *,
        skip_dir=None,
        max_depth: int = MAX_DEPTH,
        truncated: list[str] | None = None,
    ) -> Iterator[tuple[str, Entry]]:
        """(relative posix path, entry) of every non-directory under ``path``, depth first,
        names sorted; directories are entered unless ``skip_dir(rel_path)`` says no.
        Links and special files are yielded (never followed); directories deeper than
        ``max_depth`` are not entered, and their paths go to ``truncated`` when given."""
        parts = split(path) if path.strip() not in ("", ".") else ()
        stack = [(parts, 0)]
        while stack:
            d, depth = stack.pop()
            try:
                entries = self._list(d, "/".join(d) or ".")
            except PathError:
                if d == parts:
                    raise
                continue  # replaced while walking: what is there now is not ours to chase
            subdirs = []
            for e in sorted(entries, key=lambda e: e.name):
                rel = "/".join((*d, e.name))
                if e.kind == "dir":
                    if skip_dir and skip_dir(rel):
                        continue
                    if depth < max_depth:
                        subdirs.append(((*d, e.name), depth + 1))
                    elif truncated is not None:
                        truncated.append(rel)
                else:
                    yield rel, e
            stack.extend(reversed(subdirs))

    # -- writing -------------------------------------------------------------------------
    def _make_dirs(self, parts: tuple[str, ...], shown: str) -> int:
        """A descriptor of the directory ``parts``, made (owned like its parent) if missing."""
        cur = self._root_fd()
        try:
            for i, name in enumerate(parts):
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=cur)
                except FileNotFoundError:
                    try:
                        os.mkdir(name, 0o755, dir_fd=cur)
                    except FileExistsError:
                        pass
                    except OSError as e:
                        raise _why(e, "/".join(parts[: i + 1])) from None
                    try:
                        nxt = os.open(
                            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=cur
                        )
                    except OSError as e:
                        raise _why(e, "/".join(parts[: i + 1])) from None
                    _own_like(nxt, cur)
                except OSError as e:
                    raise _why(e, "/".join(parts[: i + 1]) or shown) from None
                os.close(cur)
                cur = nxt
            return cur
        except BaseException:
            os.close(cur)
            raise

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` as the file at ``path`` (see the module docstring for ownership)."""
        parts = split(path)
        if not parts:
            raise NotRegular(f"{path!r} is the workspace root, a directory")
        parent = self._make_dirs(parts[:-1], path)
        try:
            name = parts[-1]
            flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            created = True
            try:
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=parent)
            except FileExistsError:
                created = False
                try:
                    fd = os.open(name, flags, dir_fd=parent)
                except OSError as e:
                    raise _why(e, path) from None
            except OSError as e:
                raise _why(e, path) from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise NotRegular(f"{path!r} is not a regular file")
                if created:
                    _own_like(fd, parent)
                os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError as e:
                raise _why(e, path) from None
            finally:
                os.close(fd)
        finally:
            os.close(parent)

    def unlink(self, path: str) -> None:
        """Remove the file or link at ``path`` (nothing there is fine; a directory is refused)."""
        parts = split(path)
        if not parts:
            raise NotRegular(f"{path!r} is the workspace root, a directory")
        try:
            parent = self._dir_fd(parts[:-1], path)
        except NotFound:
            return
        try:
            os.unlink(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise _why(e, path) from None
        finally:
            os.close(parent)


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (from its current offset)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _own_like(fd: int, parent_fd: int) -> None:
    """As root, give what we created the owner of its directory (the sandbox user)."""
    if os.geteuid() != 0:
        return
    st = os.fstat(parent_fd)
    os.fchown(fd, st.st_uid, st.st_gid)


def read_tree(
    root: str | Path, max_bytes: int | None = None, truncated: list[str] | None = None
) -> dict[str, bytes]:
    """Every non-junk regular file under ``root``: relative posix path -> bytes.

    Links, FIFOs and devices are skipped (never followed or opened), directories below
    ``MAX_DEPTH`` levels are not read (named in ``truncated`` when given), and
    ``max_bytes`` bounds the total before anything over it is read (``TreeTooLarge``), so
    a planted sparse file costs nothing.
    """
    tree = SafeRoot(root)
    out: dict[str, bytes] = {}
    total = 0
    junk_dir = lambda rel: rel.rsplit("/", 1)[-1] in JUNK_PARTS  # noqa: E731
    for rel, e in tree.walk(skip_dir=junk_dir, truncated=truncated):
        if e.kind != "file" or is_junk(Path(rel)):
            continue
        room = None if max_bytes is None else max_bytes - total
        if room is not None and e.size > room:
            raise TreeTooLarge(f"the workspace holds more than {max_bytes} bytes of files")
        try:
            data, _ = tree.read(rel, e.size + 1 if room is None else room + 1)
        except PathError:
            continue  # changed while reading: what it is now is not a regular file
        total += len(data)
        if max_bytes is not None and total > max_bytes:
            raise TreeTooLarge(f"the workspace holds more than {max_bytes} bytes of files")
        out[rel] = data
    return dict(sorted(out.items()))
