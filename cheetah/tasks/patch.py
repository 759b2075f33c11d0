"""Unified diffs: apply one to a directory, make one from two texts or two directories.

Why a small Python applier rather than ``git apply``/``patch -p1`` through the
workspace: patches are applied by the grader (trusted, on the host files under the
workspace ``root``), so they must not depend on what tools a sandbox image ships or
on whether the root sits inside some git repository (``git apply`` then silently
skips paths outside it). Applying is all-or-nothing: every hunk is located before
any file is written, and a failure names the file and hunk.

Handles ``-p1`` paths (``a/``, ``b/``), ``diff --git`` headers, new and deleted files
(``/dev/null``), ``\\ No newline at end of file`` and hunks that moved by some lines.
Deliberately left out: fuzzy context matching, renames/copies without content,
binary patches, file modes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A diff that is malformed or does not apply."""


@dataclass
class _Hunk:
    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[_Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def _strip(name: str) -> str | None:
    name = name.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_patch(text: str) -> list[FilePatch]:
    """The file sections of a unified diff."""
    files: list[FilePatch] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(_strip(line[4:]), _strip(lines[i + 1][4:]))
            files.append(fp)
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if not files:
                raise PatchError(f"line {i + 1}: hunk before any ---/+++ file header")
            hunk = _Hunk(int(m[1]))
            n_old = int(m[2]) if m[2] is not None else 1
            n_new = int(m[4]) if m[4] is not None else 1
            i += 1
            last = ""  # kind of the previous body line: " ", "-" or "+"
            while i < len(lines) and (n_old > 0 or n_new > 0 or lines[i].startswith("\\")):
                body = lines[i]
                tag, content = body[:1], body[1:]
                i += 1
                if tag == "\\":  # the previous line had no newline at the end
                    if last in (" ", "-"):
                        hunk.old[-1] = hunk.old[-1].rstrip("\n")
                    if last in (" ", "+"):
                        hunk.new[-1] = hunk.new[-1].rstrip("\n")
                    continue
                if body in ("\n", "\r\n"):  # a blank context line whose space was stripped
                    tag, content = " ", body
                if tag in (" ", "-"):
                    hunk.old.append(content)
                    n_old -= 1
                if tag in (" ", "+"):
                    hunk.new.append(content)
                    n_new -= 1
                if tag not in (" ", "-", "+"):
                    raise PatchError(f"line {i}: unexpected line in hunk: {body[:40]!r}")
                last = tag
            if n_old > 0 or n_new > 0:
                raise PatchError(f"{files[-1].path}: hunk at line {hunk.old_start} is truncated")
            files[-1].hunks.append(hunk)
            continue
        i += 1
    return files


def _find(lines: list[str], block: list[str], expected: int) -> int | None:
    """Where ``block`` occurs in ``lines``, nearest to ``expected`` (0-based)."""
    if not block:
        return min(max(expected, 0), len(lines))
    n = len(block)
    for delta in range(len(lines) + 1):
        for pos in (expected - delta, expected + delta) if delta else (expected,):
            if 0 <= pos <= len(lines) - n and lines[pos : pos + n] == block:
                return pos
    return None


def _apply_file(fp: FilePatch, before: str | None) -> str | None:
    if fp.new_path is None:
        return None
    lines = [] if before is None else before.splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    for k, hunk in enumerate(fp.hunks, 1):
        expected = max(hunk.old_start - 1, 0) if hunk.old else hunk.old_start
        pos = _find(lines[cursor:], hunk.old, expected - cursor)
        if pos is None:
            raise PatchError(f"{fp.path}: hunk {k} (line {hunk.old_start}) does not apply")
        pos += cursor
        out.extend(lines[cursor:pos])
        out.extend(hunk.new)
        cursor = pos + len(hunk.old)
    out.extend(lines[cursor:])
    return "".join(out)


def patch_paths(text: str) -> set[str]:
    """Every path a unified diff names (old and new sides; ``PatchError`` if it is broken)."""
    return {p for fp in parse_patch(text) for p in (fp.old_path, fp.new_path) if p}


def patch_files(text: str, read: Callable[[str], str | None]) -> dict[str, str | None]:
    """The new content of every file ``text`` changes (``None``: deleted); nothing written.

    ``read(rel)`` gives a file's current text, or ``None`` when it does not exist.
    """
    files = parse_patch(text)
    if not files:
        raise PatchError("the patch holds no file sections (---/+++ headers)")
    results: dict[str, str | None] = {}
    for fp in files:
        rel = fp.old_path or fp.new_path or ""
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise PatchError(f"{rel}: path leaves the repository")
        if fp.old_path is None:
            if results.get(rel) is not None or (rel not in results and read(rel) is not None):
                raise PatchError(f"{fp.new_path}: the patch creates it but it already exists")
            before = None
        else:
            before = results[fp.old_path] if fp.old_path in results else read(fp.old_path)
            if before is None:
                raise PatchError(f"{fp.old_path}: no such file to patch")
        results[fp.path] = _apply_file(fp, before)
        if fp.old_path and fp.new_path and fp.old_path != fp.new_path:
            results[fp.old_path] = None
    return results


def patch_tree(tree: dict[str, bytes], text: str) -> dict[str, bytes | None]:
    """``patch_files`` over an in-memory tree (as ``read_tree`` returns), as UTF-8 bytes."""

    def read(rel: str) -> str | None:
        data = tree.get(rel)
        return None if data is None else data.decode("utf-8")

    changes = patch_files(text, read)
    return {k: None if v is None else v.encode("utf-8") for k, v in changes.items()}


def with_changes(tree: dict[str, bytes], changes: dict[str, bytes | None]) -> dict[str, bytes]:
    """A copy of ``tree`` with ``changes`` applied (``None`` deletes a file)."""
    after = dict(tree)
    for rel, data in changes.items():
        if data is None:
            after.pop(rel, None)
        else:
            after[rel] = data
    return after


def apply_patch(root: str | Path, text: str) -> list[str]:
    """Apply a unified diff to the files under ``root``; return the paths it changed."""
    root = Path(root)

    def read(rel: str) -> str | None:
        target = root / rel
        if target.is_file():
            return target.read_text(encoding="utf-8")
        if target.exists():
            raise PatchError(f"{rel}: not a regular file")
        return None

    results = patch_files(text, read)
    for rel, content in results.items():
        target = root / rel
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8", newline="")
    return sorted(results)


def diff_texts(path: str, before: str | None, after: str | None) -> str:
    """A ``-p1`` unified diff of one file (``None``: the file does not exist on that side)."""
    a = [] if before is None else before.splitlines(keepends=True)
    b = [] if after is None else after.splitlines(keepends=True)
    old = "/dev/null" if before is None else f"a/{path}"
    new = "/dev/null" if after is None else f"b/{path}"
    out = []
    for line in difflib.unified_diff(a, b, fromfile=old, tofile=new, n=3):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def changed_files(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """Paths added, removed or changed between two trees."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def diff_trees(before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """A unified diff from one tree to another (text files; binary ones are named only)."""
    parts = []
    for p in changed_files(before, after):
        a, b = before.get(p), after.get(p)
        try:
            ta = None if a is None else a.decode("utf-8")
            tb = None if b is None else b.decode("utf-8")
        except UnicodeDecodeError:
            parts.append(f"Binary files a/{p} and b/{p} differ\n")
            continue
        parts.append(diff_texts(p, ta, tb))
    return "".join(parts)
