"""New ruff problems: what an agent's change adds to the files it touched.

Ruff runs on this host on file contents (it only reads them; the repo's root ruff settings are
copied beside them into a scratch directory), so lint does not depend on what a sandbox image
ships. Problems are compared as a multiset of ``path: CODE message``: lines shift when code is
edited. Deliberately left out: style checks beyond ruff, line-level attribution.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path

from ruff.__main__ import find_ruff_bin

RUFF_CONFIGS = ("ruff.toml", ".ruff.toml", "pyproject.toml")


def has_ruff_config(tree: dict[str, bytes]) -> bool:
    """Whether the repo declares ruff settings at its root (ruff.toml, .ruff.toml, [tool.ruff])."""
    if "ruff.toml" in tree or ".ruff.toml" in tree:
        return True
    return b"[tool.ruff" in tree.get("pyproject.toml", b"")


async def _ruff(cwd: Path, rel: str, content: bytes, select: list[str]) -> list[str]:
    """Ruff problems in one file's content, as ``path: CODE message`` (no line numbers)."""
    proc = await asyncio.create_subprocess_exec(
        find_ruff_bin(),
        "check",
        "--no-cache",
        "--exit-zero",
        "--output-format=json",
        *select,
        "--stdin-filename",
        rel,
        "-",
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate(content)
    try:
        diags = json.loads(out or b"[]")
    except json.JSONDecodeError:
        return []
    return [f"{rel}: {d.get('code') or 'syntax'} {d.get('message', '')}" for d in diags]


async def new_lint_problems(
    tree: dict[str, bytes],
    baseline: dict[str, bytes],
    touched: list[str],
    default_select: str = "E4,E7,E9,F",
) -> list[str]:
    """Ruff problems in touched .py files that the baseline versions did not have.

    Problems are compared as a multiset of ``path: CODE message`` (lines shift when code
    is edited), so moving code keeps its count but restoring deleted code that had
    problems counts them as new. Ruff reads the repo's root settings (copied into a
    scratch directory with nothing else).
    """
    select = [] if has_ruff_config(tree) else ["--select", default_select]
    new: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cheetah-lint-") as tmp:
        cwd = Path(tmp)
        for name in RUFF_CONFIGS:
            if name in tree:
                (cwd / name).write_bytes(tree[name])
        for rel in touched:
            if not rel.endswith(".py") or rel not in tree:
                continue
            after = Counter(await _ruff(cwd, rel, tree[rel], select))
            before = (
                Counter(await _ruff(cwd, rel, baseline[rel], select))
                if rel in baseline
                else Counter()
            )
            new.extend((after - before).elements())
    return new
