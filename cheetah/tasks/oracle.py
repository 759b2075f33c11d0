"""``OraclePolicy``: solves a task by applying its reference patch through the agent's tools.

It checks the eval pipeline end to end (workspace, tools, grader, report): with it,
every valid task should pass (pass@1 = 1.0), and its messages are the SFT
demonstrations. It behaves like a tidy agent making minimal edits: reads the files it
will change (all at once; skipped when the query already quotes every text it replaces),
edits each hunk with ``edit_file`` using the smallest unique text (``minimal_edit``: the
changed lines, indentation dropped for one line, context added only until the text is
unique; the whole file as a last resort), deletes removed files, runs the tests (unless
told not to: ``run_tests=False`` gives two-turn demonstrations, edit then answer, for runs
where every turn and test run costs), answers.

It reads the reference patch and the snapshot on the host, so it is for checking
the harness, never a baseline to compare models with.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from cheetah.harness.policy import Generation, PolicyError, estimate_tokens
from cheetah.harness.protocol import render_call
from cheetah.harness.trajectory import Message
from cheetah.tasks.patch import apply_patch, parse_patch
from cheetah.tasks.schema import Task
from cheetah.tasks.snapshot import materialize

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


def oracle_messages(task: Task, root: Path, run_tests: bool = True) -> list[str]:
    """The assistant messages that apply ``task.reference_patch`` to the snapshot at ``root``."""
    if not task.reference_patch:
        raise PolicyError(f"task {task.id} has no reference patch")
    files = parse_patch(task.reference_patch)
    solved = _solved_contents(task, root)
    edits: list[str] = []
    to_read: list[str] = []
    for fp in files:
        if fp.new_path is None:
            edits.append(render_call("run_terminal", {"command": f"rm -f {fp.old_path}"}))
            continue
        before = (root / fp.old_path).read_text(encoding="utf-8") if fp.old_path else ""
        after = solved[fp.path]
        if not before:
            edits.append(render_call("edit_file", {"path": fp.path, "new_str": _block(after)}))
            continue
        found = [minimal_edit(before, h.old, h.new) for h in fp.hunks]
        pairs = [p for p in found if p is not None]
        if len(pairs) < len(found):  # some hunk's text is not unique: replace the whole file
            pairs = [(_block(before), _block(after))]
        for old, new in pairs:
            edits.append(
                render_call("edit_file", {"path": fp.path, "old_str": old, "new_str": new})
            )
        if not all(old.strip() in task.query for old, _ in pairs):
            to_read.append(fp.old_path)
    reads = [render_call("read_file", {"path": p}) for p in to_read]
    messages = []
    if reads:
        messages.append("Reading the files to change.\n" + "\n".join(reads))
    messages.append("Applying the fix.\n" + "\n".join(edits))
    if run_tests:
        messages.append(
            "Running the tests.\n" + render_call("run_terminal", {"command": TEST_COMMAND})
        )
    messages.append("Done: applied the reference change.")
    return messages


class OraclePolicy:
    """Replays the reference solution of one task (see the module docstring)."""

    def __init__(self, task: Task, run_tests: bool = True) -> None:
        self.task, self.run_tests = task, run_tests
        self.name = "oracle"
        self._messages: list[str] | None = None

    def _prepare(self) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="cheetah-oracle-") as tmp:
            root = materialize(self.task.snapshot, Path(tmp) / "repo")
            return oracle_messages(self.task, root, self.run_tests)

    async def generate(self, messages: list[Message]) -> Generation:
        if self._messages is None:
            self._messages = await asyncio.to_thread(self._prepare)
        turn = sum(1 for m in messages if m.role == "assistant")
        if turn >= len(self._messages):
            raise PolicyError("the oracle has no message left")
        text = self._messages[turn]
        return Generation(text=text, completion_tokens=estimate_tokens(text), finish_reason="stop")
