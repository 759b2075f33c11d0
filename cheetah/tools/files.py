"""Walking a workspace the way git sees it: .gitignore files (nested too) are respected.

Used by grep, list_dir and the search index; ``.git`` itself is always skipped. Every
read goes through ``SafeRoot`` (by descriptor, no link followed), so a planted
``.gitignore`` that is a link, a FIFO or a huge file is simply not a rule file.
pathspec does the gitignore pattern matching (a line it cannot parse is dropped, as
git drops it); the walk stays here so each directory's rules apply to the paths
under it, as git applies them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pathspec

from cheetah.core.safefs import MAX_DEPTH, Entry, SafeRoot, kind_of, split
from cheetah.core.workspace import PathError

ALWAYS_SKIP = frozenset({".git", ".hg", ".svn"})
MAX_GITIGNORE_BYTES = 256_000

Specs = list[tuple[str, pathspec.PathSpec]]


def _join(directory: str, name: str) -> str:
    return name if directory == "." else f"{directory}/{name}"


def _spec(lines: list[str]) -> pathspec.PathSpec:
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError:  # one bad pattern: keep the others
        good = []
        for line in lines:
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
            except ValueError:
                continue
            good.append(line)
        return pathspec.GitIgnoreSpec.from_lines(good)


def _load_spec(root: SafeRoot, directory: str) -> pathspec.PathSpec | None:
    try:
        data, _ = root.read(_join(directory, ".gitignore"), MAX_GITIGNORE_BYTES)
    except PathError:  # missing, a link, a FIFO, a directory: no rules
        return None
    return _spec(data.decode("utf-8", errors="replace").splitlines())


def _ancestor_specs(root: SafeRoot, start: str) -> Specs:
    """The .gitignore rules of the root and every directory down to ``start``'s parent."""
    parts = split(start) if start not in ("", ".") else ()
    chain = ["."] + ["/".join(parts[:i]) for i in range(1, len(parts))]
    return [(d, spec) for d in chain if (spec := _load_spec(root, d)) is not None]


def _ignored(rel: str, is_dir: bool, specs: Specs) -> bool:
    for base, spec in specs:
        sub = rel if base == "." else rel[len(base) + 1 :]
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def walk_files(root: SafeRoot, start: str = ".") -> Iterator[tuple[str, Entry]]:
    """(relative path, entry) of the regular files under ``start`` (a file or directory),
    sorted, minus ignored ones. Links, FIFOs and devices are skipped, never followed."""
    st = root.lstat(start)
    kind = None if st is None else kind_of(st.st_mode)
    norm = "/".join(split(start)) if start not in ("", ".") else "."
    if kind == "file":
        yield norm, Entry(norm.rsplit("/", 1)[-1], "file", st.st_size, st.st_mtime_ns)
        return
    if kind != "dir":
        return
    specs = _ancestor_specs(root, norm)
    if norm != "." and _ignored(norm, True, specs):
        return
    yield from _walk(root, norm, specs, 0)


def _walk(root: SafeRoot, directory: str, specs: Specs, depth: int) -> Iterator[tuple[str, Entry]]:
    own = _load_spec(root, directory)
    if own is not None and all(base != directory for base, _ in specs):
        specs = [*specs, (directory, own)]
    try:
        entries = sorted(root.list(directory), key=lambda e: e.name)
    except PathError:
        return  # replaced while walking
    for e in entries:
        rel = _join(directory, e.name)
        if e.kind == "dir":
            if e.name in ALWAYS_SKIP or depth >= MAX_DEPTH or _ignored(rel, True, specs):
                continue
            yield from _walk(root, rel, specs, depth + 1)
        elif e.kind == "file" and not _ignored(rel, False, specs):
            yield rel, e


def is_ignored(root: SafeRoot, rel: str, is_dir: bool) -> bool:
    """Whether git would ignore ``rel`` (used by list_dir to mark entries)."""
    if rel in ("", "."):
        return False
    return _ignored(rel, is_dir, _ancestor_specs(root, rel))


def looks_binary(sample: bytes) -> bool:
    """Git's rule: a NUL byte in the first 8 KB means binary."""
    return b"\x00" in sample[:8192]
