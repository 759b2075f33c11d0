"""Walking a workspace the way git sees it: .gitignore files (nested too) are respected.

Used by grep and list_dir; ``.git`` itself is always skipped. pathspec does the
gitignore pattern matching; the walk stays here so each directory's rules apply
to the paths under it, as git applies them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pathspec

ALWAYS_SKIP = frozenset({".git", ".hg", ".svn"})


def _load_spec(directory: Path) -> pathspec.PathSpec | None:
    ignore = directory / ".gitignore"
    try:
        lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ancestor_specs(root: Path, start: Path) -> list[tuple[Path, pathspec.PathSpec]]:
    """The .gitignore rules of ``root`` and every directory down to ``start``'s parent."""
    specs = []
    chain = [root, *reversed([p for p in start.parents if root in p.parents])]
    for directory in chain:
        spec = _load_spec(directory)
        if spec is not None:
            specs.append((directory, spec))
    return specs


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.PathSpec]]) -> bool:
    for base, spec in specs:
        rel = path.relative_to(base).as_posix()
        if spec.match_file(rel + "/" if is_dir else rel):
            return True
    return False


def walk_files(root: Path, start: Path) -> Iterator[Path]:
    """Files under ``start`` (a file or directory inside ``root``), sorted, minus ignored ones."""
    root = root.resolve()
    if start.is_file():
        yield start
        return
    specs = _ancestor_specs(root, start)
    if start != root and _ignored(start, True, specs):
        return
    yield from _walk(start, specs)


def _walk(directory: Path, specs: list[tuple[Path, pathspec.PathSpec]]) -> Iterator[Path]:
    own = _load_spec(directory)
    if own is not None and all(base != directory for base, _ in specs):
        specs = [*specs, (directory, own)]
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            # Links are not followed: a link could lead out of the workspace.
            continue
        if entry.is_dir():
            if entry.name in ALWAYS_SKIP or _ignored(path, True, specs):
                continue
            yield from _walk(path, specs)
        elif entry.is_file() and not _ignored(path, False, specs):
            yield path


def is_ignored(root: Path, path: Path) -> bool:
    """Whether git would ignore ``path`` (used by list_dir to mark entries)."""
    root = root.resolve()
    if path == root:
        return False
    return _ignored(path, path.is_dir(), _ancestor_specs(root, path))


def looks_binary(sample: bytes) -> bool:
    """Git's rule: a NUL byte in the first 8 KB means binary."""
    return b"\x00" in sample[:8192]


def write_text(target: Path, text: str) -> None:
    """Write a file as the workspace's owner would: in place for an existing file (owner,
    mode and links kept), and new files and directories owned like their parent. So a
    sandboxed command running as the sandbox user can still change what a tool wrote.
    """
    write_bytes(target, text.encode("utf-8"))


def write_bytes(target: Path, data: bytes) -> None:
    """``write_text`` for raw bytes."""
    if target.exists():
        with target.open("r+b") as fh:
            fh.write(data)
            fh.truncate()
        return
    missing = [p for p in reversed(target.parents) if not p.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    if os.geteuid() == 0:
        owner = (missing[0].parent if missing else target.parent).stat()
        for path in [*missing, target]:
            os.chown(path, owner.st_uid, owner.st_gid)
