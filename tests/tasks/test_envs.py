"""Per-repo Python environments: built from the repo's needs, used by its sessions, read-only."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from cheetah.tasks.envs import MARKER, build_env, env_requirements, runtime_requirements
from cheetah.tasks.schema import Task
from cheetah.tasks.session import local_sessions, open_task
from tests.sandbox.conftest import needs_isolation

DEP = "cheetah_fixture_dep"


def wheel(folder: Path) -> Path:
    """A one-module pure-Python wheel, written by hand (no build backend, no index)."""
    dist = f"{DEP}-1.0.dist-info"
    files = {
        f"{DEP}.py": "VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {DEP}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text)}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = folder / f"{DEP}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("env")
    return build_env(tmp / "env", [str(wheel(tmp))])


def test_requirements_come_from_pkg_info_without_extras(tmp_path: Path):
    (tmp_path / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: x\nRequires-Dist: six>=1.9\n"
        'Requires-Dist: pytest; extra == "test"\nRequires-Dist: tzdata; python_version>="3.9"\n'
        "\nRequires-Dist: not-a-header (in the description)\n"
    )
    assert runtime_requirements(tmp_path) == ["six>=1.9", 'tzdata; python_version>="3.9"']
    reqs = env_requirements(tmp_path, ["simplejson"])
    assert reqs[0].startswith("pytest==") and reqs[1:] == [
        "six>=1.9",
        'tzdata; python_version>="3.9"',
        "simplejson",
    ]


def test_an_env_holds_its_requirements_and_is_kept_when_unchanged(env: Path):
    assert (env / "bin" / "python").is_file() and not (env / "bin" / "python").is_symlink()
    assert list((env / "lib").glob(f"python3*/site-packages/{DEP}.py"))
    stamp = (env / MARKER).stat().st_mtime_ns
    wheel_path = next(iter((env.parent).glob("*.whl")))
    assert build_env(env, [str(wheel_path)]) == env  # nothing to do: not rebuilt
    assert (env / MARKER).stat().st_mtime_ns == stamp


def dep_task(repo: Path, env: Path | None) -> Task:
    (repo / "use_dep.py").parent.mkdir(parents=True, exist_ok=True)
    (repo / "use_dep.py").write_text(f"import {DEP}\nassert {DEP}.VALUE == 42\n")
    return Task.model_validate(
        {
            "id": "needs-dep",
            "query": "q",
            "snapshot": {"dir": str(repo)},
            "pass_to_pass": [{"command": "python use_dep.py"}],
            "env": str(env) if env else None,
        }
    )


async def run_in(backend: str, task: Task) -> tuple[int, str]:
    opener = local_sessions(backend)
    ws = await open_task(opener, task)
    try:
        r = await ws.exec("python use_dep.py && touch /env/x", timeout_s=120)
        return r.exit_code, r.output
    finally:
        await opener.close(ws)


@pytest.mark.parametrize("backend", ["local", pytest.param("isolated", marks=needs_isolation)])
async def test_a_repo_that_needs_a_dependency_runs_with_its_env_and_fails_without(
    backend: str, env: Path, tmp_path: Path
):
    code, out = await run_in(backend, dep_task(tmp_path / "repo", None))
    assert code != 0 and f"No module named '{DEP}'" in out
    code, out = await run_in(backend, dep_task(tmp_path / "repo", env))
    assert f"No module named '{DEP}'" not in out
    if backend == "isolated":  # the import worked; the env is read-only inside
        assert code != 0 and "Read-only file system" in out


@pytest.mark.parametrize("backend", ["local", pytest.param("isolated", marks=needs_isolation)])
async def test_commands_hash_strings_alike_in_every_session(backend: str, tmp_path: Path):
    """Test ids built from sets (parametrize over a set) must not change between the run a
    task was generated from and the runs that grade it."""
    task = dep_task(tmp_path / "repo", None)
    outputs = []
    for _ in range(2):
        opener = local_sessions(backend)
        ws = await open_task(opener, task)
        try:
            r = await ws.exec("python -c \"print(hash('test_parse[expected8]'))\"", timeout_s=60)
            outputs.append(r.output.strip())
        finally:
            await opener.close(ws)
    assert outputs[0] == outputs[1] and outputs[0].lstrip("-").isdigit()
