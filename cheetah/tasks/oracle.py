"""``OraclePolicy``: solves a task by applying its reference patch through the agent's tools.

It checks the eval pipeline end to end (workspace, tools, grader, report): with it,
every valid task should pass (pass@1 = 1.0). It behaves like a tidy agent: reads the
files it will change (all at once), edits each hunk with ``edit_file`` (whole file
when a hunk's text is not unique), deletes removed files, runs the tests, answers.

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


def oracle_messages(task: Task, root: Path) -> list[str]:
    """The assistant messages that apply ``task.reference_patch`` to the snapshot at ``root``."""
    if not task.reference_patch:
        raise PolicyError(f"task {task.id} has no reference patch")
    files = parse_patch(task.reference_patch)
    solved = _solved_contents(task, root)
    existing = [f.old_path for f in files if f.old_path and (root / f.old_path).is_file()]
    reads = [render_call("read_file", {"path": p}) for p in existing]
    edits: list[str] = []
    for fp in files:
        if fp.new_path is None:
            edits.append(render_call("run_terminal", {"command": f"rm -f {fp.old_path}"}))
            continue
        before = (root / fp.old_path).read_text(encoding="utf-8") if fp.old_path else ""
        after = solved[fp.path]
        if not before:
            edits.append(render_call("edit_file", {"path": fp.path, "new_str": _block(after)}))
        elif all(h.old and before.count("".join(h.old)) == 1 for h in fp.hunks):
            for h in fp.hunks:
                old, new = _block("".join(h.old)), _block("".join(h.new))
                edits.append(
                    render_call("edit_file", {"path": fp.path, "old_str": old, "new_str": new})
                )
        else:  # a hunk's text is not unique: replace the whole file
            args = {"path": fp.path, "old_str": _block(before), "new_str": _block(after)}
            edits.append(render_call("edit_file", args))
    messages = []
    if reads:
        messages.append("Reading the files to change.\n" + "\n".join(reads))
    messages.append("Applying the fix.\n" + "\n".join(edits))
    messages.append(
        "Running the tests.\n"
        + render_call("run_terminal", {"command": "python -m pytest -q -p no:cacheprovider"})
    )
    messages.append("Done: applied the reference change.")
    return messages


class OraclePolicy:
    """Replays the reference solution of one task (see the module docstring)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.name = "oracle"
        self._messages: list[str] | None = None

    def _prepare(self) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="cheetah-oracle-") as tmp:
            root = materialize(self.task.snapshot, Path(tmp) / "repo")
            return oracle_messages(self.task, root)

    async def generate(self, messages: list[Message]) -> Generation:
        if self._messages is None:
            self._messages = await asyncio.to_thread(self._prepare)
        turn = sum(1 for m in messages if m.role == "assistant")
        if turn >= len(self._messages):
            raise PolicyError("the oracle has no message left")
        text = self._messages[turn]
        return Generation(text=text, completion_tokens=estimate_tokens(text), finish_reason="stop")
