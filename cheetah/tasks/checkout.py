"""Check out a task's repo snapshot into a fresh directory on this host, and pack it.

This is the client's side, for task sources the user trusts: the tree it packs is the
tarball a session starts from (``upload:SHA``). The env server's side, for sources it must
not trust, is ``sandbox/materialize.py`` (bounded copies as the source's owner, ``git
archive`` through the hostile-tarball extraction); the two share only that extraction.

A directory is copied (caches and bytecode left out), so is a fetched package's repo
(``tasks/fetched.py``), a tarball extracted (a single
top-level folder is taken as the root, as source tarballs usually have one), a git
repo cloned and checked out at ``commit``. Then ``subdir`` is taken and the
snapshot's own ``patch`` applied. Every failure is a ``SnapshotError`` (the sandbox's:
one class for every snapshot problem) that says which source and why, so an eval can
report it per task and go on.

Deliberately left out: caching clones between tasks (copying a local directory is
cheap; a shared cache is the sandbox layer's job) and shallow fetches of one commit.
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from cheetah.core.workspace import JUNK_PARTS
from cheetah.sandbox.snapshot import SnapshotError, extract_tarball
from cheetah.tasks.fetched import fetched_repo
from cheetah.tasks.patch import PatchError, apply_patch
from cheetah.tasks.schema import Snapshot

GIT_TIMEOUT_S = 300.0


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in JUNK_PARTS or n.endswith((".pyc", ".pyo"))}


def _git(args: list[str], cwd: Path | None = None) -> None:
    what = next((a for a in args if a in ("clone", "checkout")), args[0])
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except FileNotFoundError:
        raise SnapshotError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise SnapshotError(f"git {what} did not finish in {GIT_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise SnapshotError(f"git {what} failed: {msg[-1] if msg else proc.returncode}")


def _fill(snap: Snapshot, dest: Path) -> None:
    """Put the snapshot's source (before subdir and patch) into the empty folder ``dest``."""
    if snap.dir:
        src = Path(snap.dir)
        if not src.is_dir():
            raise SnapshotError(f"snapshot directory {snap.dir} does not exist")
        shutil.copytree(src, dest, ignore=_ignore, symlinks=True, dirs_exist_ok=True)
    elif snap.package:
        src = fetched_repo(snap.package)
        shutil.copytree(src, dest, ignore=_ignore, symlinks=True, dirs_exist_ok=True)
    elif snap.tar:
        if not Path(snap.tar).is_file():
            raise SnapshotError(f"snapshot tarball {snap.tar} does not exist")
        # the env server's extraction: size and member caps, no special files or escapes
        extract_tarball(Path(snap.tar), dest)
        entries = list(dest.iterdir())
        if len(entries) == 1 and entries[0].is_dir():
            inner = entries[0]
            for child in list(inner.iterdir()):
                child.rename(dest / child.name)
            inner.rmdir()
    else:
        assert snap.git is not None
        if "://" not in snap.git and not Path(snap.git).exists():
            raise SnapshotError(f"snapshot git repository {snap.git} does not exist")
        _git(["clone", "--quiet", "--no-hardlinks", snap.git, str(dest)])
        if snap.commit:
            _git(["-c", "advice.detachedHead=false", "checkout", "--quiet", snap.commit], cwd=dest)


def materialize(snap: Snapshot, dest: str | Path) -> Path:
    """Create the repo at ``dest`` (which must not exist or be empty); return ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SnapshotError(f"{dest} is not empty")
    if snap.subdir:
        with tempfile.TemporaryDirectory(prefix="cheetah-snap-") as tmp:
            staging = Path(tmp) / "src"
            staging.mkdir()
            _fill(snap, staging)
            inner = staging / snap.subdir
            if not inner.is_dir():
                raise SnapshotError(f"snapshot has no folder {snap.subdir!r}")
            shutil.copytree(inner, dest, symlinks=True, dirs_exist_ok=True)
    else:
        _fill(snap, dest)
    if snap.patch:
        try:
            apply_patch(dest, snap.patch)
        except PatchError as e:
            raise SnapshotError(f"the snapshot patch does not apply: {e}") from None
    return dest


def pack_tree(root: Path) -> bytes:
    """A deterministic ``.tar.gz`` of ``root``'s files, directories and symlinks (sorted
    names, zero mtimes and owners: every process packs the same bytes, so the same sha)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isreg():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            elif info.isdir() or info.issym():
                tar.addfile(info)
    return buf.getvalue()


def pack_snapshot(snap: Snapshot) -> bytes:
    """The snapshot materialized in a temporary directory, packed by ``pack_tree``."""
    with tempfile.TemporaryDirectory(prefix="cheetah-pack-") as tmp:
        return pack_tree(materialize(snap, Path(tmp) / "repo"))
