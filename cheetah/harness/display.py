"""Show a run as it happens: the reply as it is written, its calls as they start, their
results and diffs when they are in, and a summary with the time to first token and tokens/s.

Two views of the loop's ``LoopEvents``, chosen by where the output goes (``view_for``):

- ``TerminalView`` (a terminal): the reply's text streams as the policy writes it (raw,
  tool-call XML included), then one line per call as it starts, then each result (shortened)
  with its diff, and a line of timings per turn; rich colours.
- ``LineView`` (a pipe or a log): one plain line per event, prefixed with the turn, never
  wrapped: the reply's lines once each is complete, each call, each result (shortened as
  on a terminal, a line each), the turn's timings; diffs as raw lines, so they stay a patch.

Presentation only: both read what the loop hands them and change nothing. Long results are
shortened on screen (the trajectory keeps them whole). Deliberately left out: showing each
call's result the moment that call ends (results come per message, as the loop gets them).
"""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from cheetah.core.wire import ToolCall
from cheetah.harness.trajectory import CallRecord, Trajectory, Turn

MAX_RESULT_LINES = 12
SUMMARY_KEYS = (
    "stop_reason",
    "stop_detail",
    "turns",
    "turns_cut",
    "tool_calls",
    "tool_errors",
    "completion_tokens",
    "first_token_s",
    "tokens_per_s",
    "wall_s",
)


def _short(text: str, lines: int = MAX_RESULT_LINES) -> str:
    parts = text.splitlines()
    if len(parts) <= lines:
        return text
    return "\n".join([*parts[:lines], f"... ({len(parts) - lines} more lines)"])


def _args(args: dict[str, str]) -> str:
    return ", ".join(
        f"{k}={v.strip()[:60]!r}" if "\n" not in v.strip() else f"{k}=<{len(v)} chars>"
        for k, v in args.items()
    )


def timings(turn: Turn) -> str:
    """One turn's generation and tool timings, in words."""
    parts = [f"generate {turn.generate_s:.2f} s", f"{turn.completion_tokens} tokens"]
    if turn.generate_s > 0:
        parts.append(f"{turn.completion_tokens / turn.generate_s:.1f} tokens/s")
    if turn.first_token_s is not None:
        parts.append(f"first token {turn.first_token_s:.2f} s")
    if turn.finish_reason == "length":
        parts.append("cut at the token cap")
    if turn.calls:
        parts.append(f"tools {turn.tools_s:.2f} s")
    return " · ".join(parts)


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


class TerminalView:
    """``LoopEvents`` for a terminal (see the module docstring)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._at_line_start = True

    def on_start(self, index: int) -> None:
        self.console.rule(f"turn {index + 1}")
        self._at_line_start = True

    def on_text(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()  # a partial line too: that is the point of streaming
        self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self.console.file.write("\n")
            self._at_line_start = True

    def on_calls(self, turn: Turn, calls: list[ToolCall]) -> None:
        self._end_line()
        for call in calls:
            title = Text(f"▶ {call.name}", style="bold cyan")
            title.append(f"({_args(call.args)})  running…", style="cyan")
            self.console.print(title)

    def on_turn(self, traj: Trajectory, turn: Turn) -> None:
        self._end_line()
        for call in turn.calls:
            self.console.print(self._call_title(call))
            style = "red" if call.is_error else "dim"
            self.console.print(Text(_short(call.output), style=style))
            if diff := call.meta.get("diff"):
                self.console.print(
                    Syntax(diff, "diff", theme="ansi_dark", background_color="default")
                )
        self.console.print(Text(timings(turn), style="dim"))

    @staticmethod
    def _call_title(call: CallRecord) -> Text:
        title = Text(f"◀ {call.name}", style="bold cyan")
        title.append(f"({_args(call.args)})", style="cyan")
        title.append(f"  {call.wall_s * 1000:.0f} ms", style="dim")
        return title

    def summary(self, traj: Trajectory) -> None:
        s = traj.summary()
        table = Table(show_header=False, box=None)
        for key in SUMMARY_KEYS:
            table.add_row(key, "-" if s[key] is None else _fmt(s[key]))
        table.add_row("calls_by_tool", ", ".join(f"{k}={v}" for k, v in s["calls_by_tool"].items()))
        if traj.todos:
            done = sum(t["status"] == "done" for t in traj.todos)
            table.add_row("todos", f"{done}/{len(traj.todos)} done")
        color = {"finished": "green", "limit": "yellow"}.get(traj.stop_reason or "", "red")
        self.console.print(Panel(table, title="trajectory", border_style=color))


class LineView:
    """``LoopEvents`` as plain lines, one per event (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._turn = 0
        self._pending = ""  # the reply's text after its last complete line

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def on_start(self, index: int) -> None:
        self._turn, self._pending = index + 1, ""

    def on_text(self, text: str) -> None:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._line(f"turn {self._turn} | {line}")

    def _flush(self) -> None:
        if self._pending:
            self._line(f"turn {self._turn} | {self._pending}")
            self._pending = ""

    def on_calls(self, turn: Turn, calls: list[ToolCall]) -> None:
        self._flush()
        for call in calls:
            self._line(f"turn {self._turn} call {call.index}: {call.name}({_args(call.args)})")

    def on_turn(self, traj: Trajectory, turn: Turn) -> None:
        self._flush()
        for call in turn.calls:
            lines = _short(call.output).splitlines() or [""]
            status = "error" if call.is_error else "ok"
            self._line(
                f"turn {self._turn} result {call.index}: {call.name} {status} "
                f"{call.wall_s * 1000:.0f} ms: {lines[0]}"
            )
            for line in lines[1:]:  # shortened as on a terminal; the trajectory keeps it whole
                self._line(f"turn {self._turn} result {call.index} | {line}")
            if diff := call.meta.get("diff"):
                self._line(f"turn {self._turn} diff {call.index}:")
                self._line(diff.rstrip("\n"))
        self._line(f"turn {self._turn}: {timings(turn)}")

    def summary(self, traj: Trajectory) -> None:
        s = traj.summary()
        for key in SUMMARY_KEYS:
            self._line(f"{key}: {'-' if s[key] is None else _fmt(s[key])}")
        self._line("calls_by_tool: " + ", ".join(f"{k}={v}" for k, v in s["calls_by_tool"].items()))


def view_for(console: Console) -> TerminalView | LineView:
    """The view for where ``console`` writes: a terminal streams, anything else gets lines."""
    return TerminalView(console) if console.is_terminal else LineView(console)
