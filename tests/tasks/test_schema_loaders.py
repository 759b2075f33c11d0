import json
from pathlib import Path

import pytest

from cheetah.tasks.loaders import TaskFileError, load_tasks, parse_tasks, select_tasks
from cheetah.tasks.schema import Check, Snapshot, Task

GOOD = {
    "id": "t1",
    "query": "fix it",
    "snapshot": {"dir": "repos/x"},
    "fail_to_pass": ["tests/test_a.py::test_one", {"command": "python check.py", "timeout_s": 5}],
    "pass_to_pass": ["tests/test_a.py::test_two"],
    "tags": ["demo"],
    "split": "heldout",
    "tier": "easy",
}


def write(tmp_path: Path, *records) -> Path:
    path = tmp_path / "sub" / "tasks.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


def test_load_resolves_relative_snapshot_against_the_file(tmp_path):
    [task] = load_tasks(write(tmp_path, GOOD))
    assert task.snapshot.dir == str((tmp_path / "sub" / "repos" / "x").resolve())
    assert task.fail_to_pass[0].test == "tests/test_a.py::test_one"
    assert task.fail_to_pass[1].command == "python check.py"
    assert task.fail_to_pass[1].timeout_s == 5
    assert (task.split, task.tier, task.line) == ("heldout", "easy", 1)


def test_malformed_json_names_the_line(tmp_path):
    path = write(tmp_path, GOOD, "\n", '{"id": "t2", oops}\n')
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    assert f"{path}:3: not valid JSON" in str(e.value)


def test_missing_and_wrong_fields_name_line_and_field(tmp_path):
    no_snapshot = {k: v for k, v in GOOD.items() if k != "snapshot"} | {"id": "t2"}
    bad_split = GOOD | {"id": "t3", "split": "test"}
    bad_check = GOOD | {"id": "t4", "fail_to_pass": [{"test": "a", "command": "b"}]}
    with pytest.raises(TaskFileError) as e:
        load_tasks(write(tmp_path, GOOD, no_snapshot, bad_split, bad_check))
    problems = e.value.problems
    assert any(":2: snapshot: Field required" in p for p in problems)
    assert any(":3: split:" in p for p in problems)
    assert any(":4: fail_to_pass.0" in p and "exactly one of test" in p for p in problems)
    assert len(problems) == 3


def test_duplicate_id_and_no_checks_are_errors(tmp_path):
    no_checks = GOOD | {"id": "t9", "fail_to_pass": [], "pass_to_pass": []}
    with pytest.raises(TaskFileError) as e:
        load_tasks(write(tmp_path, GOOD, GOOD, no_checks))
    text = str(e.value)
    assert ":2: id: 't1' already used on line 1" in text
    assert ":3:" in text and "at least one check" in text


def test_snapshot_needs_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one of dir, tar, git"):
        Snapshot(dir="a", tar="b.tar")
    with pytest.raises(ValueError, match="commit is only meaningful with git"):
        Snapshot(dir="a", commit="abc")


def test_swebench_record_loads_with_json_encoded_lists(tmp_path):
    rec = {
        "instance_id": "astropy__astropy-12907",
        "repo": "astropy/astropy",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "problem_statement": "separability_matrix is wrong for nested models",
        "patch": "diff --git a/x.py b/x.py\n",
        "test_patch": "diff --git a/t.py b/t.py\n",
        "FAIL_TO_PASS": json.dumps(["tests/test_sep.py::test_nested"]),
        "PASS_TO_PASS": "[]",
    }
    [task] = load_tasks(write(tmp_path, rec))
    assert task.id == "astropy__astropy-12907"
    assert task.snapshot.git == "https://github.com/astropy/astropy"
    assert task.snapshot.commit == rec["base_commit"]
    assert task.fail_to_pass == [Check(test="tests/test_sep.py::test_nested")]
    assert task.test_patch == rec["test_patch"]
    assert task.reference_patch == rec["patch"]


def test_swebench_bad_list_names_the_field(tmp_path):
    rec = {"instance_id": "x", "problem_statement": "q", "FAIL_TO_PASS": "[not json"}
    with pytest.raises(TaskFileError, match=r":1: FAIL_TO_PASS: not a JSON list"):
        load_tasks(write(tmp_path, rec))


def test_select_filters():
    tasks = [
        Task.model_validate(GOOD | {"id": f"t{i}", "tier": tier, "split": split})
        for i, (tier, split) in enumerate(
            [("easy", "train"), ("easy", "heldout"), ("hard", "train")]
        )
    ]
    assert [t.id for t in select_tasks(tasks, tier="easy")] == ["t0", "t1"]
    assert [t.id for t in select_tasks(tasks, split="train", limit=1)] == ["t0"]
    assert [t.id for t in select_tasks(tasks, ids=["t2"])] == ["t2"]
    tagged = [t.model_copy(update={"tags": ["x"] if t.id == "t1" else []}) for t in tasks]
    assert [t.id for t in select_tasks(tagged, tag="x")] == ["t1"]


def test_a_snapshot_names_its_repo():
    assert Snapshot(package="tinydb==4.9.0").repo == "tinydb"
    assert Snapshot(dir="/data/repos/webapi/").repo == "webapi"
    assert Snapshot(tar="/a/b/proj.tar.gz").repo == "proj"
    assert Snapshot(git="https://github.com/o/lib.git", subdir="src/").repo == "lib/src"


def test_parse_tasks_skips_comments_and_blank_lines(tmp_path):
    tasks = parse_tasks(["# a comment", "", json.dumps(GOOD)], "mem", tmp_path)
    assert [t.line for t in tasks] == [3]


def test_several_tiers_are_selected_and_spread_equally():
    from cheetah.tasks.loaders import load_tasks, select_tasks, spread

    held = select_tasks(load_tasks("curriculum"), tier=["line", "locate"], split="heldout")
    assert {t.tier for t in held} == {"line", "locate"}
    picked = spread(held, 64)
    assert [t.tier for t in picked].count("line") == [t.tier for t in picked].count("locate") == 32
    assert [t.id for t in picked] == [t.id for t in held if t in picked]  # file order kept
    for tier in ("line", "locate"):  # evenly spaced: the held-out repo and most others are in
        repos = {t.snapshot.dir.rsplit("/", 1)[-1] for t in picked if t.tier == tier}
        assert "webapi" in repos and len(repos) >= 5, repos
    assert spread(held, 0) == held and spread(held, 10_000) == held
    assert len(spread(held, 5)) == 5  # an odd limit: the first tier gets the extra one


def test_an_xz_task_file_loads_like_the_plain_one(tmp_path):
    import lzma

    record = {"id": "t", "query": "q", "snapshot": {"dir": "repo"}, "pass_to_pass": ["x"]}
    (tmp_path / "t.jsonl.xz").write_bytes(lzma.compress((json.dumps(record) + "\n").encode()))
    [task] = load_tasks(tmp_path / "t.jsonl.xz")
    assert task.id == "t" and task.snapshot.dir == str(tmp_path / "repo")
    (tmp_path / "bad.jsonl.xz").write_bytes(b"not xz at all")
    with pytest.raises(TaskFileError, match="not an xz file"):
        load_tasks(tmp_path / "bad.jsonl.xz")
