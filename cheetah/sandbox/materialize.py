"""Building a snapshot's files for the store: a directory copied on behalf of its owner, a
git commit archived, and the tree handed to the sandbox user.

``copy_readable_tree`` copies a directory as its owner could read it: run as root, an entry
the source's owner could not read by its mode bits (a root-only file, say) is left out of
the copy, so a sandbox user never reads what the source's owner could not. Paths under the
source are opened by descriptor without following links, so a swap while copying cannot
lead elsewhere; entries, depth and bytes are bounded by ``ServerLimits``. ``git_archive``
streams ``git archive`` through the same bounded tar extraction as uploads
(``snapshot.extract_stream``). ``store.py`` decides when to build and where; this module only
builds. Left out: following links (a link is copied as a link) and special files (FIFOs,
sockets and devices are not copied).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

from cheetah.limits import ServerLimits
from cheetah.sandbox.snapshot import SnapshotError, SnapshotSpec, extract_stream


def git_archive(spec: SnapshotSpec, dest: Path, limits: ServerLimits) -> None:
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


def disk_bytes(root: Path) -> int:
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


def chown_tree(root: Path, uid: int, gid: int) -> None:
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


def note_skipped(src: Path, skipped: list[str]) -> None:
    import logging

    logging.getLogger(__name__).warning(
        "snapshot of %s: %d entries its owner cannot read were left out (%s%s)",
        src,
        len(skipped),
        ", ".join(skipped[:5]),
        ", ..." if len(skipped) > 5 else "",
    )
