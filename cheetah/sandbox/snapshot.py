"""Task snapshots: a directory, a tarball, or a git repo at a commit, made read-only once.

A snapshot is materialized into ``base_dir/snapshots/<key>`` (copied, extracted or
``git archive``d; owned by the sandbox uid so sessions can change their copy-up
files) and then shared read-only as the lower layer of every session forked from
it. Keys: a directory by its absolute path (read once per process: call
``SnapshotStore.forget`` to re-read it), a tarball by its SHA-256, a git snapshot
by repo path and resolved commit. Superseded generations of a refreshed directory
stay on disk until the base directory is cleaned (live sessions may still use them). Materialization writes to a temporary name and
renames, so a crash never leaves half a snapshot behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel


class SnapshotError(ValueError):
    """The snapshot cannot be made: missing path, bad tarball, unknown commit."""


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
                try:
                    with tarfile.open(src) as tf:
                        tf.extractall(tmp, filter="data")  # refuses ../ and absolute members
                except (tarfile.TarError, OSError) as e:
                    raise SnapshotError(f"cannot extract {spec.path!r}: {e}") from None
            else:
                tmp.mkdir()
                proc = subprocess.Popen(
                    ["git", "-C", str(src), "archive", "--format=tar", spec.commit or "HEAD"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                assert proc.stdout is not None
                with tarfile.open(fileobj=proc.stdout, mode="r|") as tf:
                    tf.extractall(tmp, filter="data")
                if proc.wait() != 0:
                    raise SnapshotError(f"git archive failed: {proc.stderr.read().decode()[:300]}")
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
