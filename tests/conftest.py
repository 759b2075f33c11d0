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
import time
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

# The suite's own sandbox dir (unless one is given), so what it leaves is its own to find.
os.environ.setdefault("CHEETAH_SANDBOX_DIR", f"/tmp/cheetah-sandbox-test-{os.getpid()}")

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


def mount_points(under: str | Path) -> list[str]:
    """Mount points of this machine below the folder ``under``."""
    prefix = str(Path(under).resolve()) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(prefix)]


def _status(proc: Path) -> dict[str, str]:
    fields = {}
    for line in (proc / "status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def leftovers() -> set[str]:
    """What sandboxed sessions of this suite left on the host: mounts under the sandbox dir
    (session layers), processes in its sessions' cgroups, and processes of the sandbox uid
    (10001) that descend from this process (where there are no cgroups: a session that was
    not closed keeps its sandbox running under its ``bwrap``; an orphan re-parented away
    from this process is found by its cgroup only)."""
    from cheetah.sandbox.cgroups import base_tag
    from cheetah.sandbox.config import SandboxConfig, default_base_dir

    base = str(default_base_dir().resolve())
    out = {f"mount {point}" for point in mount_points(Path(base) / "sessions")}
    tag = f"cheetah/{base_tag(base)}-"  # the suite's session cgroups (other suites' differ)
    uid, me = str(SandboxConfig().uid), str(os.getpid())
    parents: dict[str, str] = {}
    sandboxed: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
            status = _status(proc)
        except OSError:
            continue
        parents[proc.name] = status.get("PPid", "0")
        if tag in cgroups:
            out.add(f"process {proc.name} ({status.get('Name', '?')!r})")
        elif status.get("Uid", "").split()[:1] == [uid] and not status["State"].startswith("Z"):
            sandboxed.add(proc.name)
    for pid in sandboxed:
        seen, up = set(), parents.get(pid)
        while up and up not in seen and up not in ("0", "1"):
            if up == me:
                out.add(f"process {pid} (uid {uid})")
                break
            seen.add(up)
            up = parents.get(up)
    return out


@pytest.fixture(autouse=True)
def nothing_outlives_a_test() -> Iterator[None]:
    """No session mount and no sandboxed process that a test made outlives it (those there
    before it are not its own). What a closing session kills may take a moment to go."""
    before = leftovers()
    yield
    deadline = time.monotonic() + 10.0
    while (new := leftovers() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not new, f"left behind by this test: {sorted(new)}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end, the runtime mounts of this process's sandboxes are released (what runs at
    exit anyway), and then nothing is left under the suite's sandbox dir."""
    from cheetah.sandbox.config import default_base_dir
    from cheetah.sandbox.isolated import close_live_sandboxes

    close_live_sandboxes()
    base = str(default_base_dir().resolve())
    mounted = mount_points(base)
    if mounted:
        if session.exitstatus == 0:
            session.exitstatus = 1
        print(f"\nmounts left under the suite's sandbox dir: {mounted}")
    elif base.startswith("/tmp/cheetah-sandbox-test-"):
        shutil.rmtree(base, ignore_errors=True)  # the suite's own: snapshots, layers, etc
