"""The oracle's demonstrations: minimal, unique edits; no read when the query quotes the text;
a file the query does not name is searched for, in each of the three styles."""

from cheetah.harness.protocol import parse_message
from cheetah.tasks.checkout import materialize
from cheetah.tasks.oracle import (
    STYLES,
    _read_around,
    enclosing_function,
    minimal_edit,
    oracle_demonstration,
    oracle_messages,
    reads_first,
    recovers,
    style_for,
)
from cheetah.tasks.patch import diff_texts
from cheetah.tasks.schema import Check, Snapshot, Task

BEFORE = """def f(x):
    y = x + 1
    return y


def g(x):
    y = x + 1
    if y > 2:
        return y
    return 0
"""


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_one_changed_line_unique_without_indentation():
    old, new = _lines(BEFORE)[6:9], _lines(BEFORE.replace("y > 2", "y >= 2"))[6:9]
    assert minimal_edit(BEFORE, old, new) == ("if y > 2:", "if y >= 2:")


def test_context_is_added_only_until_the_text_is_unique():
    after = BEFORE.replace("    y = x + 1\n    if", "    y = x - 1\n    if")
    a, b = _lines(BEFORE), _lines(after)
    old_str, new_str = minimal_edit(BEFORE, a[5:9], b[5:9])  # "y = x + 1" occurs twice
    assert BEFORE.count(old_str.lstrip("\n")) == 1
    assert old_str.lstrip("\n").splitlines() == ["    y = x + 1", "    if y > 2:"]
    assert new_str.lstrip("\n").splitlines() == ["    y = x - 1", "    if y > 2:"]


def test_no_unique_span_gives_none():
    text = "a\na\na\n"
    assert minimal_edit(text, ["a\n"], ["b\n"]) is None


def _task(tmp_path, query: str) -> tuple[Task, object]:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    after = BEFORE.replace("y > 2", "y >= 2")
    (repo / "m.py").write_text(BEFORE)
    task = Task(
        id="t",
        query=query,
        snapshot=Snapshot(dir=str(repo)),
        fail_to_pass=[Check(test="tests/test_m.py::test_g")],
        reference_patch=diff_texts("m.py", BEFORE, after),
    )
    return task, repo


def test_the_oracle_reads_only_what_the_query_does_not_quote(tmp_path):
    task, repo = _task(tmp_path, "Fix `g` in m.py; the line `if y > 2:` is wrong.")
    messages = oracle_messages(task, repo)
    calls = [[c.name for c in parse_message(m)] for m in messages]
    assert calls == [["edit_file"], ["run_terminal"], []]
    [edit] = parse_message(messages[0])
    assert (edit.args["old_str"], edit.args["new_str"]) == ("if y > 2:", "if y >= 2:")

    task, repo = _task(tmp_path / "b", "Fix `g` in m.py.")
    calls = [[c.name for c in parse_message(m)] for m in oracle_messages(task, repo)]
    assert calls == [["read_file"], ["edit_file"], ["run_terminal"], []]
    calls = [[c.name for c in parse_message(m)] for m in oracle_messages(task, repo, False)]
    assert calls == [["read_file"], ["edit_file"], []], "without the test run: edit, answer"


def test_read_first_reads_around_a_quoted_line_of_a_named_file_for_a_share_of_tasks(tmp_path):
    task, repo = _task(tmp_path, "Fix `g` in m.py; the line `if y > 2:` is wrong.")
    messages = oracle_messages(task, repo, run_tests=False, read_first=True)
    calls = [[c.name for c in parse_message(m)] for m in messages]
    assert calls == [["read_file"], ["edit_file"], []]
    [read] = parse_message(messages[0])
    assert read.args == {"path": "m.py", "start_line": "4", "end_line": "12"}  # line 8 +- 4
    assert messages[1:] == oracle_messages(task, repo, run_tests=False)  # then as without
    # an edit that took context lines to be unique is read around where that block starts
    block = parse_message(_read_around("f.py", "\nx = 1\ny = 2\n", "a\nx = 1\nb\nx = 1\ny = 2\n"))
    assert block[0].args == {"path": "f.py", "start_line": "1", "end_line": "8"}  # line 4 +- 4
    tasks = [task.model_copy(update={"id": f"t{i}"}) for i in range(200)]
    shares = {share: sum(reads_first(t, share) for t in tasks) for share in (0.0, 0.5, 1.0)}
    assert shares[0.0] == 0 and shares[1.0] == 200 and 70 < shares[0.5] < 130, shares
    # independent of the search style: each style has tasks that read first and some that do not
    by_style = {(style_for(t), reads_first(t, 0.5)) for t in tasks}
    assert by_style == {(style, first) for style in STYLES for first in (True, False)}


def test_a_file_the_query_does_not_name_is_searched_for_first_in_each_style(tmp_path):
    task, repo = _task(tmp_path, "One operator is inverted in the line `if y > 2:`. Fix it.")
    shapes = {}
    for style in STYLES:
        messages = oracle_messages(task, repo, run_tests=False, style=style)
        shapes[style] = [[c.name for c in parse_message(m)] for m in messages]
        [grep] = [c for c in parse_message(messages[0]) if c.args.get("path") is None]
        assert grep.name == "grep" and grep.args == {"pattern": "if y > 2:", "literal": "true"}
        assert messages[-1] == "I changed `if y > 2:` to `if y >= 2:` in m.py."
    assert shapes == {
        "search": [["grep"], ["edit_file"], []],
        "read": [["grep"], ["read_file"], ["edit_file"], []],
        "parallel": [["grep", "grep"], ["edit_file"], []],
    }
    [read] = parse_message(oracle_messages(task, repo, False, "read")[1])
    assert read.args == {"path": "m.py", "start_line": "4", "end_line": "12"}  # line 8 +- 4
    [_, test] = parse_message(oracle_messages(task, repo, False, "parallel")[0])
    assert test.args == {"pattern": "def test_g(", "path": "tests/test_m.py", "literal": "true"}
    assert {style_for(task.model_copy(update={"id": f"t{i}"})) for i in range(30)} == set(STYLES)


async def test_every_style_solves_real_locate_tasks_without_a_tool_error(tmp_path):
    from cheetah.sandbox.config import SandboxConfig
    from cheetah.tasks.episode import run_episode
    from cheetah.tasks.loaders import load_tasks, select_tasks
    from cheetah.tasks.oracle import OraclePolicy
    from cheetah.tasks.session import local_sessions

    tasks = select_tasks(load_tasks("curriculum"), tier="locate", split="train")
    sessions = local_sessions("local", config=SandboxConfig(base_dir=tmp_path))
    for task, style in zip(tasks[::60], STYLES * 2, strict=False):
        policy = OraclePolicy(task, run_tests=False)
        policy._messages = oracle_messages(
            task, materialize(task.snapshot, tmp_path / task.id), False, style
        )
        ep = await run_episode(task, policy, sessions)
        assert ep.grade is not None and ep.grade.correct, (task.id, style)
        calls = ep.trajectory.calls
        assert calls[0].name == "grep" and not any(c.is_error for c in calls), (task.id, style)
        assert calls[0].output.count("\n") == 0  # the quoted line is unique in the repo


def test_a_bug_report_naming_neither_file_nor_line_searches_for_the_function_first(tmp_path):
    task, repo = _task(tmp_path, "tests/test_m.py::test_g fails: assert 0 == 3. Fix the bug.")
    shapes = {}
    for style in STYLES:
        messages = oracle_messages(task, repo, run_tests=False, style=style)
        shapes[style] = [[c.name for c in parse_message(m)] for m in messages]
        grep = parse_message(messages[0])[0]
        assert grep.args == {"pattern": "def g", "literal": "true"}
        [read] = parse_message(messages[1])
        assert read.args == {"path": "m.py", "start_line": "6", "end_line": "10"}  # all of g
    assert shapes == {
        "search": [["grep"], ["read_file"], ["edit_file"], []],
        "read": [["grep"], ["read_file"], ["edit_file"], []],
        "parallel": [["grep", "grep"], ["read_file"], ["edit_file"], []],
    }
    # the grep is for the start the function's name shares with the failing test's
    task = task.model_copy(update={"fail_to_pass": [Check(test="tests/t.py::test_g_twice")]})
    assert parse_message(oracle_messages(task, repo, False)[0])[0].args["pattern"] == "def g"
    long = BEFORE.replace("def g(", "def grow_twice(")
    (repo / "m.py").write_text(long)
    task = task.model_copy(
        update={
            "fail_to_pass": [Check(test="tests/t.py::test_grow")],
            "reference_patch": diff_texts("m.py", long, long.replace("y > 2", "y >= 2")),
        }
    )
    assert parse_message(oracle_messages(task, repo, False)[0])[0].args["pattern"] == "def grow"
    assert enclosing_function(BEFORE, 8) == ("g", 6, 10)
    assert enclosing_function(BEFORE, 4) is None  # between functions
    assert enclosing_function("def (:", 1) is None


def test_a_recovering_demonstration_makes_a_refused_edit_it_does_not_train_on(tmp_path):
    task, repo = _task(tmp_path, "Fix `g` in m.py; the line `if y > 2:` is wrong.")
    demo = oracle_demonstration(task, repo, run_tests=False, recover=True)
    calls = [parse_message(m) for m in demo.messages]
    assert [[c.name for c in turn] for turn in calls] == [
        ["edit_file"],
        ["read_file"],
        ["edit_file"],
        [],
    ]
    assert calls[0][0].args["old_str"] == "if y >= 2:" and "if y >= 2:" not in BEFORE
    assert calls[2][0].args["old_str"] == "if y > 2:"
    assert demo.untrained == {0}  # only the refused edit
    assert demo.messages[-1] == "I changed `if y > 2:` to `if y >= 2:` in m.py."
    assert oracle_demonstration(task, repo, run_tests=False).untrained == frozenset()
    # no recovery where the "wrong" text is in the file: that edit would go through
    (repo / "m.py").write_text(BEFORE + "\nif y >= 2:\n    pass\n")
    demo = oracle_demonstration(task, repo, run_tests=False, recover=True)
    assert demo.untrained == frozenset() and len(demo.messages) == 2
    tasks = [task.model_copy(update={"id": f"t{i}"}) for i in range(200)]
    assert 60 < sum(recovers(t, 0.5) for t in tasks) < 140
    assert {(recovers(t, 0.5), reads_first(t, 0.5)) for t in tasks} == {
        (a, b) for a in (True, False) for b in (True, False)
    }


async def test_the_oracle_solves_real_bug_reports_and_recovers_without_another_error(tmp_path):
    from cheetah.sandbox.config import SandboxConfig
    from cheetah.tasks.episode import run_episode
    from cheetah.tasks.loaders import load_tasks, select_tasks
    from cheetah.tasks.oracle import OraclePolicy
    from cheetah.tasks.session import local_sessions

    sessions = local_sessions("local", config=SandboxConfig(base_dir=tmp_path))
    reports = select_tasks(load_tasks("curriculum"), tier="behaviour", split="train")[::150]
    lines = select_tasks(load_tasks("curriculum"), tier="line", split="train")[::90]
    for task, recover in [(t, False) for t in reports] + [(t, True) for t in lines]:
        policy = OraclePolicy(task, run_tests=False, recover=recover)
        ep = await run_episode(task, policy, sessions)
        assert ep.grade is not None and ep.grade.correct, task.id
        calls = ep.trajectory.calls
        errors = [c.is_error for c in calls]
        if recover:
            assert errors == [True, False, False] and policy.untrained == {0}, task.id
        else:
            assert calls[0].name == "grep" and calls[0].output.strip(), task.id
            assert not any(errors) and calls[-1].name == "edit_file", task.id
