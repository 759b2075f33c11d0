"""Run the tool calls of one assistant message concurrently; results come back in call order.

Ordering rule (``order.conflicts``): two calls conflict when they touch overlapping
workspace paths and at least one of them writes (a directory overlaps everything under
it; '.' is the whole workspace). A call starts once every earlier conflicting call has
finished; all others start at once; ``order.Planner`` finds what each waits for in time
linear in the calls. So an edit and a later read of the same file see each
other in message order, while ten independent reads, greps and commands overlap.
``run_terminal`` declares no paths: a command that depends on an edit belongs in
the next message (the system prompt says so).

Every failure becomes an error result naming the call: malformed XML (from the
parser), unknown tool, missing or unknown arguments, a ``ToolError``, a bad path,
the per-call time limit, or a bug in a tool (reported without a traceback).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable

from cheetah.core.wire import ToolCall, ToolResult
from cheetah.core.workspace import PathError
from cheetah.tools.base import Access, Tool, ToolContext, ToolError
from cheetah.tools.order import Planner

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_S = 900.0


def _clean(paths: frozenset[str]) -> frozenset[str]:
    return frozenset(p if p.startswith(":") else os.path.normpath(p) for p in paths)


def check_args(call: ToolCall, tool: Tool) -> str | None:
    """An error message for missing or unknown arguments, or None."""
    spec = tool.spec
    where = f"call {call.index} ({call.name})"
    names = ", ".join(f"<{p.name}>" for p in spec.params) or "no arguments"
    unknown = [a for a in call.args if spec.param(a) is None]
    if unknown:
        return f"{where}: unknown argument <{unknown[0]}>; {spec.name} takes {names}"
    missing = [p.name for p in spec.params if p.required and p.name not in call.args]
    if missing:
        return f"{where}: missing required argument <{missing[0]}>; {spec.name} takes {names}"
    return None


def _access(call: ToolCall, tool: Tool | None) -> Access:
    if tool is None or call.error:
        return Access()
    try:
        acc = tool.access(call.args)
    except Exception:  # a bad argument is reported when the call runs
        return Access(writes=frozenset({"."}))
    return Access(reads=_clean(acc.reads), writes=_clean(acc.writes))


def unknown_tool(call: ToolCall, known: Iterable[str]) -> str:
    """The error a call to a tool that is not on offer gets (the model reads it next turn)."""
    names = ", ".join(known)
    return f"call {call.index} ({call.name}): unknown tool {call.name!r}; the tools are: {names}"


async def run_batch(
    calls: list[ToolCall],
    ctx: ToolContext,
    tools: dict[str, Tool],
    *,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> list[ToolResult]:
    """Run all calls of one message; results in call order with start offset and wall time."""
    t0 = time.monotonic()
    planner = Planner(len(calls))
    tasks: list[asyncio.Task[ToolResult]] = []
    joins: list[asyncio.Future] = []
    for call in calls:
        waits = planner.add(_access(call, tools.get(call.name)))
        for members in planner.joins[len(joins) :]:
            done = [tasks[m] if m < len(calls) else joins[m - len(calls)] for m in members]
            joins.append(asyncio.gather(*done, return_exceptions=True))
        deps = [tasks[w] if w < len(calls) else joins[w - len(calls)] for w in waits]
        tasks.append(asyncio.create_task(_run_one(call, tools, ctx, deps, t0, call_timeout_s)))
    return list(await asyncio.gather(*tasks))


async def _run_one(
    call: ToolCall,
    tools: dict[str, Tool],
    ctx: ToolContext,
    deps: list[asyncio.Future],
    t0: float,
    timeout_s: float,
) -> ToolResult:
    if deps:
        await asyncio.wait(deps)
    start = time.monotonic()
    result = ToolResult(index=call.index, name=call.name, output="", started_s=start - t0)
    where = f"call {call.index} ({call.name})"
    tool = tools.get(call.name)
    try:
        if call.error:
            raise ToolError(call.error)
        if tool is None:
            raise ToolError(unknown_tool(call, tools))
        if problem := check_args(call, tool):
            raise ToolError(problem)
        out = await asyncio.wait_for(tool.run(call.args, ctx), timeout=timeout_s)
        result.output, result.is_error, result.meta = out.text, out.is_error, out.meta
    except (ToolError, PathError) as e:
        result.output, result.is_error = f"Error: {e}", True
    except TimeoutError:
        result.output, result.is_error = (
            f"Error: {where} did not finish within {timeout_s:g} s",
            True,
        )
    except Exception as e:
        log.exception("tool %s failed", call.name)
        result.output = f"Error: {where} failed inside the tool: {type(e).__name__}: {e}"
        result.is_error = True
    result.wall_s = time.monotonic() - start
    return result
