"""The package installs: a wheel built from this tree, put into a fresh venv with the base
dependencies only (no ``ml`` extra), gives a working ``cheetah`` outside the checkout: the
tools, an oracle eval on a bundled task (the task set, its repos and the graders' pytest
all come with the install), and a clear error naming the extra for a verb that needs it.

Slow and needs the package registry (pip resolves the base dependencies), like ``make``.
"""

import json
import shutil
import subprocess
import sys

import pytest

from cheetah import __version__
from tests.conftest import REPO_ROOT

# Builds, installs (pip resolves from the registry) and runs ten commands, each bounded at
# 600 s: the suite's 300 s for the whole would be the bound a busy machine meets first.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def sh(*cmd, cwd=None, stdin=None, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=600
    )
    if check:
        assert r.returncode == 0, (
            f"{cmd}: rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        )
    return r


def test_wheel_in_a_fresh_venv_runs_tools_and_an_oracle_eval(tmp_path):
    src, dist, venv, work = (tmp_path / d for d in ("src", "dist", "venv", "work"))
    shutil.copytree(REPO_ROOT, src, ignore=NOT_SOURCE)  # the checkout stays untouched
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, src)
    [wheel] = dist.glob("cheetah-*.whl")
    base_python = getattr(sys, "_base_executable", sys.executable)
    sh(base_python, "-m", "venv", venv)
    sh(venv / "bin" / "pip", "install", "-q", wheel)
    assert sh(venv / "bin" / "python", "-c", "import torch", check=False).returncode != 0
    cheetah = venv / "bin" / "cheetah"

    work.mkdir()
    assert sh(cheetah, "--version", cwd=work).stdout.strip() == f"cheetah {__version__}"

    (work / "repo").mkdir()
    (work / "repo" / "app.py").write_text("def answer():\n    return 42\n")
    message = (
        '<tool name="read_file"><path>app.py</path></tool>\n'
        '<tool name="grep"><pattern>return 42</pattern></tool>'
    )
    out = sh(cheetah, "tools", "run", "--repo", "repo", cwd=work, stdin=message).stdout
    assert '<tool_result name="read_file" index="1">' in out and "return 42" in out
    assert '<tool_result name="grep" index="2">' in out and "app.py:2" in out

    sh(cheetah, "eval", "--tasks", "benchmark", "--limit", "1", "--model", "oracle",
       "--out", "report", cwd=work)  # fmt: skip
    [sample] = json.loads((work / "report" / "report.json").read_text())["samples"]
    assert sample["correct"] is True, sample.get("failed_checks")

    r = sh(cheetah, "train", "--config", "quickstart", cwd=work, check=False)
    # the hint names the wheel this cheetah came from, torch first: `cheetah` on the index
    # is another project
    assert r.returncode == 2 and "pip install torch==2.13.0 && pip install '" in r.stderr
    assert ".whl[ml]'" in r.stderr and "cheetah[ml]" not in r.stderr, r.stderr
    r = sh(cheetah, "export", "--eval", "report", "--out", "x.parquet", cwd=work, check=False)
    assert r.returncode == 2 and "pyarrow, from the 'ml' extra" in r.stderr, r.stderr
    assert (work / "x.jsonl").exists() is False
    sh(cheetah, "export", "--eval", "report", "--out", "x.jsonl", cwd=work)
    assert json.loads((work / "x.jsonl").read_text())["correct"] is True
