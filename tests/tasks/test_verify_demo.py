"""Demonstrations that check their own fix (issue 46): the failing test the report names runs
after the edit, the answer quotes its passing line, and a share of them make a plausible wrong
fix first, see the test fail and edit again; run through real sessions and the grader."""

from __future__ import annotations

from cheetah.harness.protocol import parse_message
from cheetah.tasks.oracle import OraclePolicy, oracle_demonstration, retries, verifies
from cheetah.tasks.patch import diff_texts
from cheetah.tasks.schema import Check, Snapshot, Task
from cheetah.tasks.verify_demo import check_command, named_tests, passing_line, wrong_variant

FIXED = "def within(x, hi):\n    return x <= hi\n\n\ndef total(a, b):\n    return a + b\n"
TESTS = (
    "from m import within, total\n\n\n"
    "def test_within():\n    assert within(2, 2) and within(1, 2) and not within(3, 2)\n\n\n"
    "def test_total():\n    assert total(2, 3) == 5\n"
)


def _names(message: str) -> list[str]:
    return [c.name for c in parse_message(message)]


def test_a_wrong_variant_is_another_of_the_fixes_family_and_unique():
    lt, minus = FIXED.replace("x <= hi", "x < hi"), FIXED.replace("a + b", "a - b")
    assert wrong_variant(lt, "x < hi", "x <= hi", "s") in {"x > hi", "x >= hi"}
    assert wrong_variant(minus, "a - b", "a + b", "s") == "a * b"
    assert wrong_variant("n = 4\n", "n = 4", "n = 3", "s") == "n = 2"  # the other side
    assert wrong_variant("n = 0\n", "n = 1", "n = 0", "s") is None  # no -1
    assert wrong_variant("a == b\n", "a == b", "a != b", "s") is None  # no third member
    assert wrong_variant("x = f(a, b)\n", "x = f(a, b)", "x = f(b, a)", "s") is None  # 2 tokens
    # where every variant would not be unique once written (it is in the file already): none
    crowded = "y = a > b\nz = a >= b\nw = a <= b\n"
    assert wrong_variant(crowded, "a > b", "a < b", "s") is None
    picks = {wrong_variant(lt, "x < hi", "x <= hi", str(i)) for i in range(40)}
    assert picks == {"x > hi", "x >= hi"}  # the seed picks among them


def test_the_passing_line_is_read_only_from_a_passing_run():
    ok = "exit code: 0\n.                                  [100%]\n1 passed in 0.03s\n"
    assert passing_line(ok) == "1 passed in 0.03s"
    assert passing_line("exit code: 1\nF\n1 failed in 0.1s\n") is None
    assert passing_line("exit code: 0\n(no output)\n") is None
    assert passing_line("exit code: 0\n== 2 passed, 1 warning in 0.1s ==\n") == (
        "2 passed, 1 warning in 0.1s"
    )


def _repo_task(tmp_path, buggy: str, query: str) -> Task:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "m.py").write_text(buggy)
    (repo / "tests" / "test_m.py").write_text(TESTS)
    return Task(
        id="within-lte",
        query=query,
        snapshot=Snapshot(dir=str(repo)),
        fail_to_pass=[Check(test="tests/test_m.py::test_within")],
        pass_to_pass=[Check(test="tests/test_m.py::test_total")],
        reference_patch=diff_texts("m.py", buggy, FIXED),
    )


QUERY = "A test fails:\n- tests/test_m.py::test_within\nFind the bug and fix it."


def test_a_retrying_demonstration_edits_wrong_tests_and_edits_again(tmp_path):
    task = _repo_task(tmp_path, FIXED.replace("x <= hi", "x < hi"), QUERY)
    assert named_tests(task) == ["tests/test_m.py::test_within"]
    assert check_command(task).endswith("tests/test_m.py::test_within")
    root = tmp_path / "repo"
    demo = oracle_demonstration(task, root, run_tests=False, verify=True, retry=True)
    names = [_names(m) for m in demo.messages]
    assert names[-5:] == [["edit_file"], ["run_terminal"], ["edit_file"], ["run_terminal"], []]
    first, again = parse_message(demo.messages[-5])[0], parse_message(demo.messages[-3])[0]
    wrongs = {"return x > hi", "return x >= hi"}
    assert first.args["old_str"] == "return x < hi" and first.args["new_str"] in wrongs
    assert again.args == {
        "path": "m.py",
        "old_str": first.args["new_str"],
        "new_str": "return x <= hi",
    }
    assert demo.untrained == {len(demo.messages) - 5}  # only the wrong fix
    assert demo.fix_turn == len(demo.messages) - 3
    plain = oracle_demonstration(task, root, run_tests=False, verify=True)
    assert [_names(m) for m in plain.messages][-3:] == [["edit_file"], ["run_terminal"], []]
    assert plain.untrained == frozenset() and plain.fix_turn is None
    # shares: stable per task, independent of each other
    tasks = [task.model_copy(update={"id": f"t{i}"}) for i in range(200)]
    assert 60 < sum(verifies(t, 0.5) for t in tasks) < 140
    assert {(verifies(t, 0.5), retries(t, 0.5)) for t in tasks} == {
        (a, b) for a in (True, False) for b in (True, False)
    }


async def _episode(task: Task, tmp_path):
    from cheetah.sandbox.config import SandboxConfig
    from cheetah.tasks.episode import run_episode
    from cheetah.tasks.session import local_sessions

    sessions = local_sessions("local", config=SandboxConfig(base_dir=tmp_path / "sandbox"))
    policy = OraclePolicy(task, run_tests=False, verify=True, retry=True)
    return policy, await run_episode(task, policy, sessions)


async def test_the_wrong_fix_fails_its_test_and_the_right_one_passes(tmp_path):
    task = _repo_task(tmp_path, FIXED.replace("x <= hi", "x < hi"), QUERY)
    policy, ep = await _episode(task, tmp_path)
    assert ep.grade is not None and ep.grade.correct
    runs = [c for c in ep.trajectory.calls if c.name == "run_terminal"]
    assert len(runs) == 2
    assert runs[0].output.startswith("exit code: 1") and "1 failed" in runs[0].output
    assert runs[1].output.startswith("exit code: 0") and "1 passed" in runs[1].output
    answer = ep.trajectory.messages[-1].content
    assert "The failing test passes now: `1 passed" in answer
    assert len(policy.untrained) == 1  # the wrong fix


async def test_a_wrong_fix_that_passes_is_not_edited_again(tmp_path):
    # the bug is ">" where "<=" is right; the test sees only within(1, 2): of the wrong
    # variants, ">=" fails it but "<" passes it, and the oracle then answers
    weak = TESTS.replace("within(2, 2) and within(1, 2) and not within(3, 2)", "within(1, 2)")
    task = _repo_task(tmp_path, FIXED.replace("x <= hi", "x > hi"), QUERY)
    (tmp_path / "repo" / "tests" / "test_m.py").write_text(weak)
    for i in range(40):  # a task id whose wrong variant is "<" (passes the weak test)
        t = task.model_copy(update={"id": f"weak-{i}"})
        demo = oracle_demonstration(t, tmp_path / "repo", run_tests=False, verify=True, retry=True)
        if parse_message(demo.messages[-5])[0].args["new_str"] == "return x < hi":
            break
    else:
        raise AssertionError("no seed picks the variant that passes")
    _, ep = await _episode(t, tmp_path)
    edits = [c for c in ep.trajectory.calls if c.name == "edit_file"]
    runs = [c for c in ep.trajectory.calls if c.name == "run_terminal"]
    assert len(edits) == 1 and len(runs) == 1 and runs[0].output.startswith("exit code: 0")
    assert "passes now" in ep.trajectory.messages[-1].content
    assert ep.grade is not None  # graded as any answer: "<" is not the reference fix
