"""SWE-bench instances out and back in: the same tasks, and they validate."""

from __future__ import annotations

import json
import subprocess

import pytest

from cheetah.tasks.checkout import materialize
from cheetah.tasks.loaders import TaskFileError
from cheetah.tasks.session import local_sessions
from cheetah.tasks.swebench import (
    export_tasks,
    import_instances,
    read_instances,
    write_instances,
)
from cheetah.tasks.validate import validate_tasks

from .conftest import bug_task

SWEBENCH_KEYS = {
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
    "FAIL_TO_PASS", "PASS_TO_PASS",
}  # fmt: skip


async def test_round_trip_gives_the_same_tasks_and_they_validate(calc_repo, tmp_path):
    command = "python -m pytest -q -rA -p no:cacheprovider"
    tasks = [
        bug_task(calc_repo, split="heldout", tier="line"),
        bug_task(calc_repo, id="calc-no-hidden", hidden_files={}, test_command=command,
                 fail_to_pass=["tests/test_ops.py::test_add"]),
    ]  # fmt: skip
    result = export_tasks(tasks, tmp_path / "repos")
    assert result.skipped == {} and len(result.records) == 2
    path = write_instances(result.records, tmp_path / "instances.jsonl")
    records = read_instances(path)
    rec = records[0]
    assert rec.keys() >= SWEBENCH_KEYS and rec["repo"] == "local/calc_repo"
    assert json.loads(rec["FAIL_TO_PASS"]) == [c.test for c in tasks[0].fail_to_pass]
    assert "tests/test_hidden.py" in rec["test_patch"]  # hidden files travel as the test patch
    back = import_instances(records, tmp_path / "repos", str(path))
    for before, after in zip(tasks, back, strict=True):
        assert after.id == before.id and after.query == before.query
        assert after.fail_to_pass == before.fail_to_pass
        assert after.pass_to_pass == before.pass_to_pass
        assert after.reference_patch == before.reference_patch
        assert (after.split, after.tier, after.scope, after.test_command) == (
            before.split, before.tier, before.scope, before.test_command
        )  # fmt: skip
        assert after.snapshot.git and after.snapshot.commit
        a = materialize(before.snapshot, tmp_path / f"a-{before.id}")
        b = materialize(after.snapshot, tmp_path / f"b-{after.id}")
        files = lambda root: {  # noqa: E731
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*") if p.is_file() and ".git" not in p.parts
        }  # fmt: skip
        assert files(a) == files(b)
    results = await validate_tasks(back, local_sessions("local"), concurrency=2)
    assert all(v.ok for v in results), [v.problems for v in results]


def test_import_names_every_bad_record(calc_repo, tmp_path):
    [rec] = export_tasks([bug_task(calc_repo)], tmp_path / "repos").records
    bad = [
        {k: v for k, v in rec.items() if k != "base_commit"},
        {**rec, "instance_id": "x1", "repo": "someone/elsewhere"},
        {**rec, "instance_id": "x2", "base_commit": "0" * 40},
        {**rec, "instance_id": "x3", "FAIL_TO_PASS": "not json"},
        rec,
        rec,
    ]
    with pytest.raises(TaskFileError) as e:
        import_instances(bad, tmp_path / "repos", "in.jsonl")
    problems = e.value.problems
    assert problems[0] == "in.jsonl:1: missing base_commit"
    assert problems[1].startswith("in.jsonl:2: no git clone of someone/elsewhere")
    assert "has no commit 0000" in problems[2] and "FAIL_TO_PASS: not a JSON list" in problems[3]
    assert problems[4] == f"in.jsonl:6: instance_id {rec['instance_id']!r} is used twice"


def test_export_skips_command_checks_and_clones_see_the_task_branches(calc_repo, tmp_path):
    shell = bug_task(calc_repo, id="shell", pass_to_pass=[{"command": "true"}])
    result = export_tasks([shell, bug_task(calc_repo)], tmp_path / "repos")
    assert "shell-command checks" in result.skipped["shell"] and len(result.records) == 1
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "repos" / "calc_repo"), str(clone)],
                   check=True)  # fmt: skip
    sha = result.records[0]["base_commit"]
    subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{sha}^{{commit}}"], check=True)


def test_import_refuses_a_repo_that_is_a_path_or_leads_out_of_repos(calc_repo, tmp_path):
    """Attack (issue 44): ``repo`` as an absolute path, with ``..``, or a clone under --repos
    that is a link (or has a linked .git) made any local git repository a task snapshot."""
    [rec] = export_tasks([bug_task(calc_repo)], tmp_path / "outside").records
    secret = tmp_path / "outside" / "calc_repo"  # holds rec's base_commit
    repos = tmp_path / "repos"
    repos.mkdir()
    (repos / "linked").symlink_to(secret)
    (repos / "gitlink").mkdir()
    (repos / "gitlink" / ".git").symlink_to(secret / ".git")
    attacks = [str(secret), "../outside/calc_repo", "local/linked", "local/gitlink"]
    records = [{**rec, "instance_id": f"x{i}", "repo": r} for i, r in enumerate(attacks)]
    with pytest.raises(TaskFileError) as e:
        import_instances(records, repos, "in.jsonl")
    problems = e.value.problems
    assert len(problems) == 4
    assert all("is a path; give owner/name" in p for p in problems[:2]), problems
    assert "the folder of" in problems[2] and "outside --repos" in problems[2]
    assert "the git directory of" in problems[3] and "outside --repos" in problems[3]


def test_import_with_a_relative_repos_writes_tasks_that_validate(calc_repo, tmp_path, monkeypatch):
    """A relative --repos is stored absolute: the task file is read from its own folder."""
    from cheetah.cli import main

    monkeypatch.chdir(tmp_path)
    result = export_tasks([bug_task(calc_repo)], tmp_path / "repos")
    write_instances(result.records, tmp_path / "instances.jsonl")
    args = ["tasks", "import", "instances.jsonl", "--repos", "repos", "--out", "out/t.jsonl"]
    assert main(args) == 0
    assert main(["tasks", "validate", "out/t.jsonl", "--sandbox", "local"]) == 0
