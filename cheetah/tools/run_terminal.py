"""run_terminal: one shell command in the workspace, with a timeout and capped output.

Each call is its own ``bash -c``: no state (cwd, variables) carries between calls,
and background processes end with their command. Output is stdout and stderr
merged, capped to its head and tail so a flood cannot fill the context.
"""

from __future__ import annotations

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import Tool, ToolContext, ToolError, ToolOutput, text_block

SPEC = ToolSpec(
    name="run_terminal",
    description=(
        "Run a shell command (bash) at the workspace root, or in <cwd>. Prints the exit code "
        "and the combined output; long output keeps its beginning and end."
    ),
    params=(
        ParamSpec("command", "the command line to run"),
        ParamSpec("timeout", "seconds before the command is killed (default 60)", required=False),
        ParamSpec("cwd", "directory to run in, relative to the workspace root", required=False),
    ),
)


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    lim = ctx.limits
    command = text_block(args["command"]).strip()
    if not command:
        raise ToolError("<command> is empty")
    raw = args.get("timeout", "").strip()
    try:
        timeout = float(raw) if raw else lim.terminal_timeout_s
    except ValueError:
        raise ToolError(f"<timeout> must be a number of seconds, got {raw!r}") from None
    if not 0 < timeout <= lim.terminal_max_timeout_s:
        raise ToolError(f"<timeout> must be between 0 and {lim.terminal_max_timeout_s:g} seconds")
    result = await ctx.workspace.exec(
        command,
        timeout_s=timeout,
        cwd=args.get("cwd", ".").strip() or ".",
        output_limit=lim.terminal_output_bytes,
    )
    head = (
        f"timed out after {timeout:g} s; the command was killed"
        if result.timed_out
        else f"exit code: {result.exit_code}"
    )
    body = result.output.rstrip("\n")
    text = f"{head}\n{body}" if body else f"{head}\n(no output)"
    meta = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "exec_s": round(result.wall_s, 4),
        "omitted_bytes": result.omitted_bytes,
    }
    return ToolOutput(text, meta=meta, is_error=result.timed_out)


TOOL = Tool(SPEC, run)
