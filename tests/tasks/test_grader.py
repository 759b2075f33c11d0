import pytest

from cheetah.tasks.grader import GraderConfig, capture_baseline, grade
from cheetah.tasks.patch import apply_patch
from cheetah.tasks.pytest_run import parse_pytest_outcomes
from cheetah.tasks.session import local_sessions, open_task

from .conftest import HIDDEN, edit_session


async def test_hidden_material_is_never_in_the_workspace_before_grading(calc_task):
    sessions = local_sessions("local")
    ws = await open_task(sessions, calc_task)
    try:
        files = await ws.read_tree()
        assert "tests/test_hidden.py" not in files
        blob = b"\n".join(files.values()).decode()
        assert "test_add_negative" not in blob
        assert calc_task.reference_patch not in blob
        assert b"return a - b" in files["calc/ops.py"]  # the bug is in
    finally:
        await sessions.close(ws)
    assert not sessions.env.sessions


async def graded(task, change=None, config=None):
    sessions = local_sessions("local")
    ws = await open_task(sessions, task)
    try:
        baseline = await capture_baseline(ws)
        if change:
            await edit_session(ws, change)
        return await grade(task, ws, baseline, sessions, config)
    finally:
        await sessions.close(ws)


async def test_unsolved_fails_and_solved_passes(calc_task):
    g = await graded(calc_task)
    assert not g.correct and g.reward == 0.0
    outcomes = {c.label: c.outcome for c in g.checks}
    assert outcomes == {
        "tests/test_hidden.py::test_add_negative": "failed",
        "tests/test_ops.py::test_add": "failed",
        "tests/test_ops.py::test_clamp": "passed",
    }
    assert "assert" in g.checks[0].detail

    solved = await graded(calc_task, lambda root: apply_patch(root, calc_task.reference_patch))
    assert solved.correct and solved.reward == pytest.approx(1.0)
    assert solved.touched == ["calc/ops.py"]
    assert "+    return a + b" in solved.diff


async def test_agent_cannot_preempt_a_hidden_test(calc_task):
    def cheat(root):
        (root / "tests" / "test_hidden.py").write_text("def test_add_negative():\n    pass\n")

    g = await graded(calc_task, cheat)
    assert not g.correct
    assert g.checks[0].outcome == "failed"  # the real hidden test overwrote the fake one


async def test_conventions_new_lint_and_out_of_scope(calc_task):
    def sloppy(root):
        apply_patch(root, calc_task.reference_patch)
        ops = root / "calc" / "ops.py"
        ops.write_text("import os\n" + ops.read_text())
        (root / "README.md").write_text("touched\n")

    config = GraderConfig(lint_penalty=0.25, scope_penalty=0.5)
    g = await graded(calc_task, sloppy, config)
    assert g.correct
    assert g.out_of_scope == ["README.md"]
    assert any("F401" in p for p in g.new_lint)
    assert g.conventions == pytest.approx(1.0 - 0.25 * len(g.new_lint) - 0.5)
    assert g.reward == pytest.approx(0.8 + 0.2 * g.conventions)


async def test_conventions_do_not_reward_a_wrong_answer(calc_task):
    g = await graded(calc_task)
    assert g.conventions == 1.0 and g.reward == 0.0
    ungated = await graded(calc_task, config=GraderConfig(conventions_only_if_correct=False))
    assert ungated.reward == pytest.approx(0.2)


async def test_hanging_command_check_times_out(calc_repo):
    from .conftest import bug_task

    task = bug_task(
        calc_repo, pass_to_pass=[{"command": "sleep 30", "name": "hang", "timeout_s": 0.5}]
    )
    g = await graded(task, lambda root: apply_patch(root, task.reference_patch))
    hang = next(c for c in g.checks if c.label == "hang")
    assert hang.outcome == "timeout" and not g.correct
    assert "did not finish within 0.5 s" in hang.detail


async def test_missing_test_id_counts_as_failed(calc_repo):
    from .conftest import bug_task

    task = bug_task(calc_repo, pass_to_pass=["tests/test_ops.py::test_nonexistent"])
    g = await graded(task, lambda root: apply_patch(root, task.reference_patch))
    [missing] = [c for c in g.checks if c.kind == "pass_to_pass"]
    assert missing.outcome == "missing" and not g.correct


def test_parse_pytest_outcomes():
    out = (
        "PASSED tests/a.py::test_x\nFAILED tests/a.py::test_y[1 2] - assert 1 == 2\n"
        "ERROR tests/b.py::test_z - ValueError\n"
    )
    assert parse_pytest_outcomes(out) == {
        "tests/a.py::test_x": "PASSED",
        "tests/a.py::test_y[1 2]": "FAILED",
        "tests/b.py::test_z": "ERROR",
    }
    coloured = "\x1b[32mPASSED\x1b[0m tests/a.py::\x1b[1mtest_x\x1b[0m\n"  # --color=yes
    assert parse_pytest_outcomes(coloured) == {"tests/a.py::test_x": "PASSED"}
    dashed = "t.py::test_c[now - interval '1 day'-Token]"  # a " - " inside the id itself
    assert parse_pytest_outcomes(f"PASSED {dashed}\nFAILED {dashed} - assert 0\n") == {
        dashed: "FAILED"
    }
    assert parse_pytest_outcomes("XFAIL t.py::test_d - reason - more\n") == {
        "t.py::test_d": "XFAIL"
    }
    assert HIDDEN  # the hidden test text is what the grader writes


async def test_test_patch_is_applied_only_at_grading(calc_repo):
    from cheetah.tasks.patch import diff_texts

    from .conftest import bug_task

    task = bug_task(
        calc_repo, hidden_files={}, test_patch=diff_texts("tests/test_hidden.py", None, HIDDEN)
    )
    sessions = local_sessions("local")
    ws = await open_task(sessions, task)
    try:
        assert "tests/test_hidden.py" not in await ws.read_tree()
        baseline = await capture_baseline(ws)
        await edit_session(ws, lambda root: apply_patch(root, task.reference_patch))
        g = await grade(task, ws, baseline, sessions)
    finally:
        await sessions.close(ws)
    assert g.correct
    assert g.checks[0].label == "tests/test_hidden.py::test_add_negative" and g.checks[0].passed


async def test_lint_uses_repo_config_or_a_minimal_default(tmp_path):
    from cheetah.tasks.lint_delta import new_lint_problems

    before = b"x = 1\n"
    tree = {"m.py": b'import os\nx = "{}".format(1)\n'}
    problems = await new_lint_problems(tree, {"m.py": before}, ["m.py"])
    assert [p.split()[1] for p in problems] == ["F401"]  # UP032 is not in the default set
    tree["pyproject.toml"] = b'[tool.ruff.lint]\nselect = ["UP"]\n'
    problems = await new_lint_problems(tree, {"m.py": before}, ["m.py"])
    assert [p.split()[1] for p in problems] == ["UP032"]  # the repo's own conventions
