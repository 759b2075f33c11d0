"""Where fetched real code lives, and finding a repo by ``name==version``.

``cheetah tasks fetch`` lays repos out under ``repos_dir()`` and builds their environments
under ``envs_dir()`` (``$CHEETAH_REPOS_DIR`` / ``$CHEETAH_ENVS_DIR``, else
``$XDG_CACHE_HOME/cheetah`` or ``~/.cache/cheetah``). A task snapshot that names a package
(``Snapshot.package``) is found here when its session is made, checked against the version
``fetched.json`` records, so a task file never copies the code it names.

Deliberately left out: fetching on demand (a missing repo is an error that says which
command fetches it; tasks never touch the network).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cheetah.sandbox.snapshot import SnapshotError


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cheetah"


def repos_dir() -> Path:
    return Path(os.environ.get("CHEETAH_REPOS_DIR") or cache_home() / "repos")


def envs_dir() -> Path:
    return Path(os.environ.get("CHEETAH_ENVS_DIR") or cache_home() / "envs")


def normalize(name: str) -> str:
    """A project name as its repo folder is named (PEP 503 normalization)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def fetched_repo(package: str, root: Path | None = None) -> Path:
    """The laid-out repo of ``name==version``; ``SnapshotError`` saying how to fetch it."""
    name, _, version = package.partition("==")
    root = root or repos_dir()
    repo = root / normalize(name)
    fetch = f"run `cheetah tasks fetch --only {name}` (CHEETAH_REPOS_DIR={root})"
    try:
        recorded = {
            r["name"]: r["version"] for r in json.loads((root / "fetched.json").read_text())
        }
    except (OSError, ValueError, KeyError, TypeError):
        recorded = {}
    if not repo.is_dir() or normalize(name) not in recorded:
        raise SnapshotError(f"package {package} is not fetched: {fetch}")
    if recorded[normalize(name)] != version:
        raise SnapshotError(
            f"package {package}: {recorded[normalize(name)]} is fetched, not {version}: {fetch}"
        )
    return repo


def fetched_env(package: str, root: Path | None = None) -> Path | None:
    """The environment ``tasks fetch`` built for the package's repo, if there is one."""
    env = (root or envs_dir()) / normalize(package.partition("==")[0])
    return env if (env / "pyvenv.cfg").is_file() else None


def unfetched(packages: set[str], root: Path | None = None) -> str | None:
    """None when every ``name==version`` is fetched, else one message naming the missing ones
    and the single command that fetches them all."""
    missing = []
    for package in sorted(packages):
        try:
            fetched_repo(package, root)
        except SnapshotError:
            missing.append(package)
    if not missing:
        return None
    names = " ".join(sorted({p.partition("==")[0] for p in missing}))
    return (
        f"not fetched: {', '.join(missing)}; run `cheetah tasks fetch --only {names}` "
        f"(CHEETAH_REPOS_DIR={root or repos_dir()})"
    )
