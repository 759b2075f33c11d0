"""A session's changes against its snapshot: changed paths and a git-style unified diff.

Both sides are read through ``SafeRoot`` (by descriptor, no link followed, regular
files only), since the session can rename and swap its files while we read them. A
link is shown as ``symlink -> target``, a FIFO, socket or device as a special file,
never opened. Files over ``MAX_DIFF_FILE_BYTES`` are compared by a streamed sha256
and reported as differing large files, so a planted sparse file costs a hash, not
its size in memory.

With an overlay, the candidates are what the upper layer touches (files, whiteouts,
and what opaque directories hide); otherwise, every file of both trees.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass

from cheetah.core.safefs import Entry, SafeRoot, read_fd
from cheetah.core.workspace import PathError

MAX_DIFF_FILE_BYTES = 1 << 20
OPAQUE_XATTR = "trusted.overlay.opaque"


@dataclass(frozen=True)
class Large:
    """A file too large to diff: its size and content hash."""

    size: int
    sha256: str


Content = bytes | Large | None  # None: nothing there


def _is_whiteout(e: Entry) -> bool:
    return e.kind == "other" and e.rdev == 0 and e.size == 0


def tree_files(root: SafeRoot, truncated: list[str] | None = None) -> set[str]:
    """Every non-directory under ``root`` (links and special files included); directories
    too deep to enter go to ``truncated``."""
    try:
        return {rel for rel, _ in root.walk(truncated=truncated)}
    except PathError:
        return set()


def layer_paths(upper: SafeRoot, lower: SafeRoot, truncated: list[str] | None = None) -> set[str]:
    """Paths an overlay upper layer touches: its files, whiteouts, and what opaque dirs hide
    (one walk of the upper layer; each directory's opaque mark is read as it is entered).
    Directories of the upper layer too deep to enter go to ``truncated``."""
    out: set[str] = set()
    opaque: list[str] = []

    def enter(d: str) -> bool:  # never skips a directory: it only notes the opaque ones
        if _opaque(upper, d):
            opaque.append(d)
        return False

    for rel, e in upper.walk(skip_dir=enter, truncated=truncated):
        if _is_whiteout(e) and lower.kind(rel) == "dir":
            out |= {f"{rel}/{sub}" for sub, _ in _walk_or_empty(lower, rel)}
        else:
            out.add(rel)
    for d in opaque:
        out |= {f"{d}/{rel}" for rel, _ in _walk_or_empty(lower, d)}
    return out


def _walk_or_empty(root: SafeRoot, top: str):
    """(path relative to ``top``, entry) of the files under ``top``, or nothing."""
    try:
        return [(rel[len(top) + 1 :], e) for rel, e in root.walk(top)]
    except PathError:
        return []


def _opaque(root: SafeRoot, rel: str) -> bool:
    return root.getxattr(rel, OPAQUE_XATTR) == b"y"


def read_content(root: SafeRoot, rel: str) -> Content:
    """What the diff compares for ``rel``: bytes, a link or special-file marker, ``Large``, or None."""
    try:
        st = root.lstat(rel)
        if st is None or stat.S_ISDIR(st.st_mode):
            return None
        if stat.S_ISLNK(st.st_mode):
            return b"symlink -> " + os.fsencode(root.readlink(rel))
        if not stat.S_ISREG(st.st_mode):
            return b"special file (not read)"
        fd, st = root.open_regular(rel)
    except PathError:  # changed while we looked: compare what can be read
        return None
    try:
        if st.st_size <= MAX_DIFF_FILE_BYTES:
            data = read_fd(fd, MAX_DIFF_FILE_BYTES + 1)
            if len(data) <= MAX_DIFF_FILE_BYTES:
                return data
            os.lseek(fd, 0, os.SEEK_SET)
        h = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
        return Large(size, h.hexdigest())
    finally:
        os.close(fd)


def changed(lower: SafeRoot, merged: SafeRoot, candidates: set[str]) -> list[str]:
    return sorted(p for p in candidates if read_content(lower, p) != read_content(merged, p))


def file_diff(before: Content, after: Content, name: str) -> str:
    """One file's unified diff, git-style headers; binary and large files are named only."""
    if before == after:
        return ""
    a = f"a/{name}" if before is not None else "/dev/null"
    b = f"b/{name}" if after is not None else "/dev/null"
    head = f"diff --git a/{name} b/{name}\n"
    if isinstance(before, Large) or isinstance(after, Large):
        return f"{head}Large files {a} and {b} differ (over {MAX_DIFF_FILE_BYTES} bytes)\n"
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


def diff(lower: SafeRoot, merged: SafeRoot, paths: list[str]) -> str:
    return "".join(file_diff(read_content(lower, p), read_content(merged, p), p) for p in paths)
