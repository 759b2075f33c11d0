"""Show a run as it happens: each turn's prose, calls, results and diffs, with rich.

Presentation only; it reads the trajectory the loop builds and changes nothing.
Long results are shortened on screen (the trajectory keeps them whole).
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from cheetah.harness.trajectory import CallRecord, Trajectory, Turn

_CALL_BLOCK = re.compile(r"<tool\s+name=.*?(?:</tool>|\Z)", re.DOTALL)
MAX_RESULT_LINES = 12


def _short(text: str, lines: int = MAX_RESULT_LINES) -> str:
    parts = text.splitlines()
    if len(parts) <= lines:
        return text
    return "\n".join([*parts[:lines], f"... ({len(parts) - lines} more lines)"])


def _call_title(call: CallRecord) -> Text:
    args = ", ".join(
        f"{k}={v.strip()[:60]!r}" if "\n" not in v.strip() else f"{k}=<{len(v)} chars>"
        for k, v in call.args.items()
    )
    title = Text(f"▶ {call.name}", style="bold cyan")
    title.append(f"({args})", style="cyan")
    title.append(f"  {call.wall_s * 1000:.0f} ms", style="dim")
    return title


class TurnPrinter:
    """An ``on_turn`` callback for ``run_agent`` that prints to a rich console."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()

    def __call__(self, traj: Trajectory, turn: Turn) -> None:
        c = self.console
        c.rule(
            f"turn {turn.index + 1}  ·  generate {turn.generate_s:.2f} s  ·  "
            f"tools {turn.tools_s:.2f} s  ·  {len(turn.calls)} call(s)"
        )
        prose = _CALL_BLOCK.sub("", turn.assistant).strip()
        if prose:
            c.print(Text(prose, style="white"))
        for call in turn.calls:
            c.print(_call_title(call))
            style = "red" if call.is_error else "dim"
            c.print(Text(_short(call.output), style=style))
            if diff := call.meta.get("diff"):
                c.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))

    def summary(self, traj: Trajectory) -> None:
        s = traj.summary()
        table = Table(show_header=False, box=None)
        for key in (
            "stop_reason",
            "stop_detail",
            "turns",
            "tool_calls",
            "tool_errors",
            "completion_tokens",
            "wall_s",
        ):
            table.add_row(key, str(s[key]))
        table.add_row("calls_by_tool", ", ".join(f"{k}={v}" for k, v in s["calls_by_tool"].items()))
        if traj.todos:
            done = sum(t["status"] == "done" for t in traj.todos)
            table.add_row("todos", f"{done}/{len(traj.todos)} done")
        color = {"finished": "green", "limit": "yellow"}.get(traj.stop_reason or "", "red")
        self.console.print(Panel(table, title="trajectory", border_style=color))
