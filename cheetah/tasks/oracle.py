"""``OraclePolicy``: solves a task by applying its reference patch through the agent's tools.

It checks the eval pipeline end to end (workspace, tools, grader, report): with it,
every valid task should pass (pass@1 = 1.0), and its messages are the SFT
demonstrations. It behaves like a tidy agent making minimal edits:

- it finds what it will change first: a file the query does not name is searched for
  (``grep`` with ``literal``, for the text the query quotes), a file whose text the query
  does not quote is read (all such files in one turn);
- it edits each hunk with ``edit_file`` using the smallest unique text (``minimal_edit``:
  the changed lines, indentation dropped for one line, context added only until the text
  is unique; the whole file as a last resort), deletes removed files;
- it runs the tests (unless told not to: ``run_tests=False`` gives short demonstrations
  for runs where every turn and test run costs) and answers with what it changed, in
  words taken from its own edit (never a claim it could parrot without making one).

A search can take one of three ``STYLES``, chosen per task by a stable hash of its id so
that SFT shows the policy all of them and RL can choose: ``search`` (the grep, then the
edit), ``read`` (the grep, then the lines around the hit read before the edit: one more
turn) and ``parallel`` (the grep and a grep for the failing test's definition in one
message: two calls in one turn). Where the query names the file and quotes the line,
``read_first`` (for a share of tasks, ``reads_first``) adds the read of those lines before
the edit: a turn a tidy agent may skip, so SFT shows both and RL with a turn cost can choose.

Where the query neither names the file nor quotes the text to change (a bug report: the
failing tests and pytest's words), it searches for the function that holds the change
(``grep`` for ``def`` and the start of its name the failing test's shares; with the
``parallel`` style, beside a grep for the failing test's definition) and reads that
function before the edit, instead of reading a file no one told it about.

``recover`` (for a share of demonstrations, ``recovers``), where the query names the file
and quotes the line, makes the first edit a refused one (``old_str`` is the fixed text,
which the file does not hold), then reads the lines around and edits again: what to do
after an error, instead of answering as if the edit was made. That refused edit is in
``Demonstration.untrained``: SFT does not train on it. ``verify`` and ``retry``
(``verify_demo``): run the failing test after the edit and quote its passing line; a wrong fix
first (untrained), the test failing, the right edit.

It reads the reference patch and the snapshot on the host, so it is for checking
the harness, never a baseline to compare models with.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cheetah.harness.policy import Generation, PolicyError, estimate_tokens
from cheetah.harness.protocol import render_call
from cheetah.harness.trajectory import Message
from cheetah.tasks.checkout import materialize
from cheetah.tasks.patch import apply_patch, parse_patch
from cheetah.tasks.schema import Task
from cheetah.tasks.verify_demo import check_call, passing_line, retry_turns

STYLES = ("search", "read", "parallel")
READ_CONTEXT = 4  # lines shown on each side of the hit by the ``read`` style
# Quiet: deprecation warnings from the environment's pytest plugins are not the repo's news.
TEST_COMMAND = "python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning"


def _block(text: str) -> str:
    # edit_file drops one newline right after the opening tag; give it one to drop.
    return "\n" + text


def _solved_contents(task: Task, root: Path) -> dict[str, str]:
    """File contents after the reference patch, computed on a scratch copy."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(root, copy)
        changed = apply_patch(copy, task.reference_patch or "")
        return {p: (copy / p).read_text(encoding="utf-8") for p in changed if (copy / p).is_file()}


def _unique(text: str, part: str) -> bool:
    return bool(part) and text.count(part) == 1


def minimal_edit(before: str, old: list[str], new: list[str]) -> tuple[str, str] | None:
    """The smallest (old_str, new_str) pair, unique in ``before``, that turns one hunk's
    ``old`` lines into its ``new`` lines; None when no span of the hunk is unique."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    core_old, core_new = old[head : len(old) - tail], new[head : len(new) - tail]
    if len(core_old) == 1 and len(core_new) == 1:  # one changed line: drop its indentation
        a, b = core_old[0].rstrip("\n"), core_new[0].rstrip("\n")
        indent = len(a) - len(a.lstrip())
        if a[:indent] == b[:indent] and a[indent:] and b[indent:] and _unique(before, a[indent:]):
            return a[indent:], b[indent:]
    spans = sorted(
        ((before_n, after_n) for before_n in range(head + 1) for after_n in range(tail + 1)),
        key=lambda span: (sum(span), span[0]),
    )
    for before_n, after_n in spans:  # the fewest context lines that make the text unique
        o = "".join(old[head - before_n : len(old) - tail + after_n])
        n = "".join(new[head - before_n : len(new) - tail + after_n])
        if _unique(before, o):
            return _block(o), _block(n)
    return None


def style_for(task: Task) -> str:
    """The search style of ``task``'s demonstration (see the module docstring)."""
    digest = hashlib.sha256(task.id.encode()).digest()
    return STYLES[digest[0] % len(STYLES)]


def _test_definition(task: Task) -> dict[str, str] | None:
    """A grep for the first failing test's ``def``, in its file (None without a test id)."""
    test = next((c.test for c in task.fail_to_pass if c.test and "::" in c.test), None)
    if test is None:
        return None
    path, _, name = test.partition("::")
    name = name.split("::")[-1].split("[", 1)[0]
    if not name.isidentifier():
        return None
    return {"pattern": f"def {name}(", "path": path, "literal": "true"}


def _search_turns(task: Task, fp_path: str, old: str, before: str, style: str) -> list[str]:
    """The turns that find ``old`` (one changed line the query quotes) before its edit."""
    grep = render_call("grep", {"pattern": old.strip(), "literal": "true"})
    test = _test_definition(task)
    if style == "parallel" and test is not None:
        return ["Searching for the line and the failing test.\n" + grep + "\n"
                + render_call("grep", test)]  # fmt: skip
    turns = ["Searching for the line.\n" + grep]
    if style == "read":
        turns.append(_read_around(fp_path, old, before))
    return turns


def _read_around(fp_path: str, old: str, before: str) -> str:
    """A turn reading the ``READ_CONTEXT`` lines on each side of where ``old`` (unique in
    ``before``, maybe several lines with ``_block``'s leading newline) starts."""
    hit = _line_of(before, old)
    lo, hi = max(1, hit - READ_CONTEXT), hit + READ_CONTEXT
    read = {"path": fp_path, "start_line": str(lo), "end_line": str(hi)}
    return "Reading the lines around it.\n" + render_call("read_file", read)


def _names(query: str, path: str) -> bool:
    """Whether ``query`` names ``path`` (not as the tail of a longer path: m.py is not named
    by tests/test_m.py)."""
    return re.search(r"(?<![\w/.-])" + re.escape(path), query) is not None


def _line_of(before: str, old: str) -> int:
    """The 1-based line where ``old`` (unique in ``before``; ``_block``'s newline allowed)
    starts."""
    return before[: before.index(old.removeprefix("\n"))].count("\n") + 1


def enclosing_function(source: str, line: int) -> tuple[str, int, int] | None:
    """Name, first and last line of the innermost function of ``source`` that holds
    ``line`` (None outside any function, or for source that does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best: tuple[str, int, int] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best[1]):
                best = (node.name, node.lineno, end)
    return best


def _stem(task: Task, name: str) -> str:
    """What to grep for after ``def ``: the start the function's name shares with the first
    failing test's (``test_reading_time`` finds ``reading_time_minutes``), as an agent with
    only the report would guess it; the whole name when they share under 4 characters."""
    test = _test_definition(task)
    called = test["pattern"].removeprefix("def ").removesuffix("(") if test else ""
    stem = called.removeprefix("test_")
    n = 0
    while n < min(len(stem), len(name)) and stem[n] == name[n]:
        n += 1
    common = name[:n].rstrip("_")
    return common if len(common) >= 4 else name


def _find_function_turns(
    task: Task, fp_path: str, old: str, before: str, style: str
) -> list[str] | None:
    """The turns that find the function holding ``old`` when the query names neither the
    file nor the text: a grep for its ``def``, then a read of the function (None when the
    change is outside a function)."""
    found = enclosing_function(before, _line_of(before, old))
    if found is None:
        return None
    name, first, last = found
    grep = render_call("grep", {"pattern": f"def {_stem(task, name)}", "literal": "true"})
    test = _test_definition(task)
    if style == "parallel" and test is not None:
        search = "Searching for the function and the failing test.\n" + grep + "\n"
        search += render_call("grep", test)
    else:
        search = f"Searching for `{name}`.\n" + grep
    read = {"path": fp_path, "start_line": str(first), "end_line": str(last)}
    return [search, f"Reading `{name}`.\n" + render_call("read_file", read)]


def reads_first(task: Task, share: float) -> bool:
    """Whether ``task``'s demonstration reads around a quoted line it could edit directly:
    true for a stable ``share`` of tasks (by a hash of the id, independent of ``style_for``)."""
    return _share_of(b"read-first:", task, share)


def recovers(task: Task, share: float) -> bool:
    """Whether ``task``'s demonstration starts with a refused edit and recovers from it: a
    stable ``share`` of tasks (a hash independent of ``reads_first`` and ``style_for``)."""
    return _share_of(b"recover:", task, share)


def verifies(task: Task, share: float) -> bool:
    """Whether ``task``'s demonstration runs the failing tests after its edit (a stable
    ``share`` of tasks, by a hash independent of the others)."""
    return _share_of(b"verify:", task, share)


def retries(task: Task, share: float) -> bool:
    """Whether ``task``'s (verifying) demonstration makes a wrong fix first (a stable ``share``)."""
    return _share_of(b"retry:", task, share)


def _share_of(salt: bytes, task: Task, share: float) -> bool:
    digest = hashlib.sha256(salt + task.id.encode()).digest()
    return int.from_bytes(digest[:4], "big") < share * 2**32


def _summary(changes: list[tuple[str, str, str]], removed: list[str]) -> str:
    """The closing answer, in the words of the edits themselves."""
    parts = []
    for path, old, new in changes:
        o, n = old.strip(), new.strip()
        one_line = o and n and "\n" not in o and "\n" not in n and len(o) + len(n) < 200
        parts.append(f"changed `{o}` to `{n}` in {path}" if one_line else f"edited {path}")
    parts += [f"removed {p}" for p in removed]
    return "I " + "; ".join(dict.fromkeys(parts)) + "."


@dataclass
class Demonstration:
    """The oracle's assistant messages, and the indices of those SFT must not train on (a
    deliberate mistake the demonstration recovers from)."""

    messages: list[str]
    untrained: frozenset[int] = field(default_factory=frozenset)
    verify: bool = False  # the answer quotes the passing run (``OraclePolicy`` adds it)
    fix_turn: int | None = None  # the edit after a wrong one: skipped if the wrong one passed


def oracle_messages(
    task: Task,
    root: Path,
    run_tests: bool = True,
    style: str | None = None,
    read_first: bool = False,
) -> list[str]:
    """The assistant messages of ``oracle_demonstration`` (no refused edit)."""
    return oracle_demonstration(task, root, run_tests, style, read_first).messages


@dataclass
class _Plan:
    """What a demonstration does, file by file, before its messages are written."""

    edits: list[str] = field(default_factory=list)
    to_read: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (path, old, new)
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # ``recover``'s refused edit, its read


def oracle_demonstration(
    task: Task,
    root: Path,
    run_tests: bool = True,
    style: str | None = None,
    read_first: bool = False,
    recover: bool = False,
    verify: bool = False,
    retry: bool = False,
) -> Demonstration:
    """The assistant messages that apply ``task.reference_patch`` to the snapshot at ``root``;
    ``style`` (one of ``STYLES``; default ``style_for(task)``) shapes a search.
    ``read_first``: where the query names the file and quotes the line (one edit), read the
    lines around it before editing (a turn an agent could skip: RL with a turn cost may
    learn to). ``recover``: for one edit of one line the query quotes in a file it names, a
    refused edit first, then a read of the lines around and the edit again (the refused one
    is untrained; it replaces ``read_first``'s read). ``verify``: after the edit, run the
    failing tests the query names (``verify_demo``), instead of the whole suite.
    ``retry`` (with ``verify``): for one edit of one changed token, a wrong fix first
    (``verify_demo.wrong_variant``, untrained), the test, its failure, the right edit, the
    test again (it replaces ``recover``)."""
    if not task.reference_patch:
        raise PolicyError(f"task {task.id} has no reference patch")
    style = style or style_for(task)
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    plan = _plan(task, root, style, read_first, recover)
    wrong = None
    if verify and retry and len(plan.changes) == 1 and not plan.removed:
        path, old, new = plan.changes[0]
        if old:
            wrong = retry_turns(task, (root / path).read_text(encoding="utf-8"), path, old, new)
    if wrong is not None:
        plan.refused = []  # one deliberate mistake per demonstration
    reads = [render_call("read_file", {"path": p}) for p in plan.to_read]
    messages = list(plan.searches)
    if reads:
        messages.append("Reading the files to change.\n" + "\n".join(reads))
    untrained = frozenset({len(messages)}) if plan.refused or wrong else frozenset()
    messages += plan.refused
    fix_turn = None
    if wrong is not None:  # the wrong fix (untrained), its test, then the right edit
        messages += wrong
        fix_turn = len(messages) - 1
    else:
        messages.append("Applying the fix.\n" + "\n".join(plan.edits))
    if verify:
        messages.append("Running the failing test.\n" + check_call(task))
    elif run_tests:
        messages.append(
            "Running the tests.\n" + render_call("run_terminal", {"command": TEST_COMMAND})
        )
    messages.append(_summary(plan.changes, plan.removed))
    return Demonstration(messages, untrained, verify, fix_turn)


def _plan(task: Task, root: Path, style: str, read_first: bool, recover: bool) -> _Plan:
    """The edits, reads and searches of ``oracle_demonstration`` (its docstring says which)."""
    files = parse_patch(task.reference_patch or "")
    solved = _solved_contents(task, root)
    plan = _Plan()
    for fp in files:
        if fp.new_path is None:
            plan.edits.append(render_call("run_terminal", {"command": f"rm -f {fp.old_path}"}))
            plan.removed.append(fp.old_path or "")
            continue
        before = (root / fp.old_path).read_text(encoding="utf-8") if fp.old_path else ""
        after = solved[fp.path]
        if not before:
            plan.edits.append(render_call("edit_file", {"path": fp.path, "new_str": _block(after)}))
            plan.changes.append((fp.path, "", ""))
            continue
        found = [minimal_edit(before, h.old, h.new) for h in fp.hunks]
        pairs = [p for p in found if p is not None]
        if len(pairs) < len(found):  # some hunk's text is not unique: replace the whole file
            pairs = [(_block(before), _block(after))]
        for old, new in pairs:
            edit = {"path": fp.path, "old_str": old, "new_str": new}
            plan.edits.append(render_call("edit_file", edit))
            plan.changes.append((fp.path, old, new))
        one = len(files) == 1 and len(pairs) == 1
        quoted = all(old.strip() in task.query for old, _ in pairs)
        named = _names(task.query, fp.path)
        if not quoted and not named and one:
            plan.searches = _find_function_turns(task, fp.path, pairs[0][0], before, style) or []
            if not plan.searches:
                plan.to_read.append(fp.old_path)
        elif not quoted:
            plan.to_read.append(fp.old_path)
        elif not named and one:
            plan.searches = _search_turns(task, fp.path, pairs[0][0], before, style)
        elif read_first and one:
            plan.searches = [_read_around(fp.path, pairs[0][0], before)]
        elif not named:
            plan.to_read.append(fp.old_path)
        if recover and one and named and quoted:  # an edit that needs no search or read first
            old, new = pairs[0]
            if "\n" in old.strip() or new.strip() in before:
                continue  # the "wrong" edit would not be refused: no recovery here
            undo = {"path": fp.path, "old_str": new, "new_str": old}  # not in the file
            read = _read_around(fp.path, old, before).split("\n", 1)[1]
            plan.refused = [
                "Applying the fix.\n" + render_call("edit_file", undo),
                "That text is not in the file: reading the lines around it.\n" + read,
            ]
            plan.searches = []  # the recovery reads those lines: no read-first turn as well
    return plan


class OraclePolicy:
    """Replays the reference solution of one task (see the module docstring). With
    ``verify``, it reads its test runs: the answer quotes the passing line, and a wrong first
    fix (``retry``) whose test passed after all is not edited again (the answer follows)."""

    def __init__(
        self,
        task: Task,
        run_tests: bool = True,
        read_first: bool = False,
        recover: bool = False,
        verify: bool = False,
        retry: bool = False,
    ) -> None:
        self.task, self.run_tests = task, run_tests
        self.read_first, self.recover = read_first, recover
        self.verify, self.retry = verify, retry
        self.name = "oracle"
        self._demo: Demonstration | None = None
        self._skipped = 0  # turns left out: the wrong fix passed its test
        self.untrained: frozenset[int] = frozenset()  # turns SFT must not train on

    def _prepare(self) -> Demonstration:
        with tempfile.TemporaryDirectory(prefix="cheetah-oracle-") as tmp:
            root = materialize(self.task.snapshot, Path(tmp) / "repo")
            demo = oracle_demonstration(
                self.task,
                root,
                self.run_tests,
                read_first=self.read_first,
                recover=self.recover,
                verify=self.verify,
                retry=self.retry,
            )
        self.untrained = demo.untrained
        return demo

    async def generate(self, messages: list[Message]) -> Generation:
        if self._demo is None:
            self._demo = await asyncio.to_thread(self._prepare)
        demo = self._demo
        turn = sum(1 for m in messages if m.role == "assistant") + self._skipped
        last = messages[-1].content if messages and messages[-1].role == "user" else ""
        if turn == demo.fix_turn and passing_line(last) is not None:
            self._skipped = len(demo.messages) - 1 - turn  # straight to the answer
            turn = len(demo.messages) - 1
        if turn >= len(demo.messages):
            raise PolicyError("the oracle has no message left")
        text = demo.messages[turn]
        if demo.verify and turn == len(demo.messages) - 1 and (line := passing_line(last)):
            text = f"{text} The failing test passes now: `{line}`."
        return Generation(text=text, completion_tokens=estimate_tokens(text), finish_reason="stop")
