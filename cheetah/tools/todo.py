"""todo: the agent's own task list, replaced whole on each call and kept in the trajectory.

Lines look like ``- [ ] pending``, ``- [~] in progress`` or ``- [x] done``; a plain
line counts as pending. State lives in the session's ``ToolContext``; every call's
result shows the whole list, so the trajectory holds each version of it.
"""

from __future__ import annotations

import re

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import Access, TodoItem, Tool, ToolContext, ToolError, ToolOutput

SPEC = ToolSpec(
    name="todo",
    description=(
        "Keep your task list. Give the whole list each time, one item per line: "
        "'- [ ] pending', '- [~] in progress', '- [x] done'. An empty list clears it."
    ),
    params=(ParamSpec("items", "the whole list, one item per line", required=False),),
)

_ITEM = re.compile(r"^\s*(?:[-*]\s*)?(?:\[(?P<mark>[ xX~])\]\s*)?(?P<text>.*?)\s*$")
_STATUS = {" ": "pending", "~": "in_progress", "x": "done", "X": "done", None: "pending"}
_MARK = {"pending": " ", "in_progress": "~", "done": "x"}


def parse_items(text: str) -> list[TodoItem]:
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _ITEM.match(line)
        if m is None or not m["text"]:
            raise ToolError(f"line {number} of <items> has no task text: {line!r}")
        items.append(TodoItem(text=m["text"], status=_STATUS[m["mark"]]))
    return items


def render_items(items: list[TodoItem]) -> str:
    if not items:
        return "The todo list is empty."
    done = sum(i.status == "done" for i in items)
    lines = [f"- [{_MARK[i.status]}] {i.text}" for i in items]
    return f"Todo list ({done}/{len(items)} done):\n" + "\n".join(lines)


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    ctx.todos = parse_items(args.get("items", ""))
    items = [{"text": i.text, "status": i.status} for i in ctx.todos]
    return ToolOutput(render_items(ctx.todos), meta={"todos": items})


def access(args: dict[str, str]) -> Access:
    # Two todo calls in one message replace the list in message order.
    return Access(writes=frozenset({":todo"}))


TOOL = Tool(SPEC, run, access)
