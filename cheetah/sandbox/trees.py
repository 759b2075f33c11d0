"""Copying and removing whole trees that a session's commands may have shaped.

A command can make a directory thousands of levels deep; Python 3.11's ``shutil.rmtree``
and ``copytree`` recurse once per level and fail with ``RecursionError`` there. ``rm``
and ``cp`` walk iteratively, never follow links, and keep what ``cp -a`` keeps (modes,
owners, times, xattrs such as overlay whiteouts). Copies always go through ``cp`` (a few
milliseconds, on fork and on reset without overlay); removal tries ``shutil.rmtree``
first, since a closed overlay session leaves only a few entries, and hands a tree too deep
for it to ``rm``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it (nothing if it is gone), never raising; a
    tree too deep for ``shutil.rmtree`` goes to ``rm``, which stays on ``path``'s
    filesystem (no mount below it is entered)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
        return
    except RecursionError:
        pass
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
