"""Fixtures shared across the suite: small workspaces and a one-call tool runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cheetah.harness.protocol import ToolCall, ToolResult
from cheetah.sandbox.workspace import LocalWorkspace
from cheetah.tools import default_tools
from cheetah.tools.base import ToolContext
from cheetah.tools.batch import run_batch

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_REPO = REPO_ROOT / "cheetah" / "data" / "sample_repo"
FIX_SCRIPT = REPO_ROOT / "cheetah" / "data" / "scripts" / "fix_sample_repo.json"


@pytest.fixture
def ws(tmp_path: Path) -> LocalWorkspace:
    root = tmp_path / "ws"
    root.mkdir()
    return LocalWorkspace(root)


@pytest.fixture
def sample_repo(tmp_path: Path) -> Path:
    dest = tmp_path / "sample_repo"
    shutil.copytree(SAMPLE_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


async def call_tool(
    ws: LocalWorkspace, name: str, ctx: ToolContext | None = None, **args: str
) -> ToolResult:
    """Run one call through the real batch runner, as the loop would."""
    ctx = ctx or ToolContext(workspace=ws)
    [result] = await run_batch([ToolCall(index=1, name=name, args=args)], ctx, default_tools())
    return result
