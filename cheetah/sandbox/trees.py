"""Copying and removing whole trees that a session's commands may have shaped.

A command can make a directory thousands of levels deep; Python 3.11's ``shutil.rmtree``
and ``copytree`` recurse once per level and fail with ``RecursionError`` there. ``rm``
and ``cp`` walk iteratively, never follow links, and keep what ``cp -a`` keeps (modes,
owners, times, xattrs such as overlay whiteouts), so both go through them; a process per
call costs a few milliseconds, on close, reset and fork only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it (nothing if it is gone); never raises for
    what is already gone, and stays on ``path``'s filesystem (no mount below it is entered)."""
    subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def copy_tree(src: Path, dest: Path) -> None:
    """Copy the directory ``src`` to ``dest`` (which must not exist), links as links."""
    out = subprocess.run(
        ["cp", "-a", "--no-target-directory", "--", str(src), str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise OSError(f"cannot copy {src} to {dest}: {out.stderr.strip()[:300]}")
