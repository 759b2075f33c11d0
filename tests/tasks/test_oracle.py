"""The oracle's demonstrations: minimal, unique edits; no read when the query quotes the text."""

from cheetah.harness.protocol import parse_message
from cheetah.tasks.oracle import minimal_edit, oracle_messages
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
