"""Fixtures shared across the suite: small workspaces and a one-call tool runner.

Hypothesis runs under the ``cheetah`` profile, loaded here before any test module is
imported (so every ``@settings`` inherits it): the same examples on every run
(derandomized, no example database), no deadline and no too-slow health check, so
the suite's outcome never depends on how busy the machine is. Tests may lower
``max_examples`` but not set a deadline (checked at collection).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from cheetah.core.wire import ToolCall, ToolResult
from cheetah.core.workspace import LocalWorkspace
from cheetah.tools import default_tools
from cheetah.tools.base import ToolContext
from cheetah.tools.batch import run_batch

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_REPO = REPO_ROOT / "cheetah" / "data" / "sample_repo"
FIX_SCRIPT = REPO_ROOT / "cheetah" / "data" / "scripts" / "fix_sample_repo.json"

settings.register_profile(
    "cheetah",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile("cheetah")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A hypothesis test that sets a deadline (or re-enables the too-slow check) would make
    the suite depend on machine load again: refuse to run it."""
    for item in items:
        used = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
        if used is not None and (
            used.deadline is not None or HealthCheck.too_slow not in used.suppress_health_check
        ):
            raise pytest.UsageError(
                f"{item.nodeid}: hypothesis settings must keep deadline=None and suppress "
                "HealthCheck.too_slow (the suite's 'cheetah' profile, tests/conftest.py)"
            )


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


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """A local Ray for a test module, its workers at the tests' own priority: Ray runs them
    at nice 15 by default, so on a busy machine they wait behind every other process (a
    22-second test took over 20 minutes beside two busy loops). ``cheetah train`` does the
    same (``rl/job.py``)."""
    import ray

    name = "RAY_worker_niceness"  # Ray's own spelling
    saved = os.environ.get(name)
    os.environ[name] = "0"
    ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
