"""Bundled task sets and configs are found by name from any directory; a file of the same
name in the working directory wins; a wrong name gets an error listing the bundled ones."""

import subprocess
import sys
from pathlib import Path

import pytest

from cheetah import bundled
from cheetah.config import ConfigError
from cheetah.rl.config import load_config
from cheetah.tasks.loaders import TaskFileError, load_tasks

BIN = Path(sys.executable).parent


def test_names_resolve_to_the_package_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert bundled.names(bundled.TASK_SETS, ".jsonl") == ["benchmark", "curriculum"]
    assert {"quickstart", "learn", "gpu"} <= set(bundled.names(bundled.CONFIGS, ".toml"))
    tasks = load_tasks("benchmark")
    assert len(tasks) == 55 and all(
        Path(t.snapshot.dir).is_relative_to(bundled.TASK_SETS / "repos") for t in tasks
    )
    cfg = load_config(Path("quickstart"))
    assert cfg.run.name == "quickstart" and str(cfg.tasks.file) == "curriculum"
    assert bundled.task_file(cfg.tasks.file) == bundled.TASK_SETS / "curriculum.jsonl"


def test_a_file_in_the_working_directory_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text('[run]\nname = "mine"\n')
    assert load_config(Path("quickstart")).run.name == "mine"
    (tmp_path / "benchmark").write_text("")
    assert load_tasks("benchmark") == []
    # a path with a directory or a suffix is never looked up in the package
    assert bundled.config_file("sub/quickstart") == Path("sub/quickstart")
    assert bundled.task_file("benchmark.jsonl") == Path("benchmark.jsonl")


def test_unknown_names_list_the_bundled_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"quickstrat: no such config file \(bundled: .*quickstart"
    ):
        load_config(Path("quickstrat"))
    with pytest.raises(
        TaskFileError, match=r"no such task file \(bundled: benchmark, curriculum, real\)"
    ):
        load_tasks("benchmarks")
    r = subprocess.run(
        [BIN / "cheetah", "tasks", "validate", "nope.jsonl"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "nope.jsonl: no such task file (bundled: benchmark" in r.stderr
    assert "Traceback" not in r.stderr
