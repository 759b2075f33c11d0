"""The XML tool-call protocol: render tool specs and calls, parse assistant messages.

A call is written as::

    <tool name="read_file"><path>src/app.py</path><start_line>1</start_line></tool>

Argument bodies are raw text: everything after ``<arg>`` up to the first ``</arg>``,
so code with ``<``, ``&``, ``]]>`` or tag-like strings needs no escaping. The one
string a raw body cannot hold is its own closing tag; for that case an argument
may name another closing tag with ``end``::

    <content end="content_1">... </content> inside the body ...</content_1>

The renderer picks ``end`` only when the body needs it, so what the model usually
sees (and should write) is the plain form. Text around calls is free prose.
A message with no calls is the agent's final answer.

Parsing never raises: a malformed call becomes a ``ToolCall`` with ``error`` set,
naming the call (1-based, as the model counts) and the tag at fault, and the loop
turns it into an error result the model can read.

Deliberately left out: nested XML, entity decoding (``&lt;`` stays ``&lt;``),
attributes other than ``name`` on ``<tool>`` and ``end`` on arguments.
"""

from __future__ import annotations

import re

from cheetah.core.wire import ToolCall, ToolResult, ToolSpec

_TOOL_OPEN = re.compile(r"<tool\s+name\s*=\s*(?:\"([^\"]*)\"|'([^']*)')\s*>")
_ARG_OPEN = re.compile(
    r"<([A-Za-z_][A-Za-z0-9_\-]*)(?:\s+end\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?\s*>"
)
_TOOL_CLOSE = "</tool>"
_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


def _closing_tag(name: str, body: str) -> str:
    """Pick the closing tag name for ``body``: ``name`` unless the body contains it."""
    end, k = name, 0
    while f"</{end}>" in body:
        k += 1
        end = f"{name}_{k}"
    return end


def render_call(name: str, args: dict[str, str]) -> str:
    """Render a call so that ``parse_message`` returns exactly ``name`` and ``args``."""
    if not _NAME.match(name):
        raise ValueError(f"tool name {name!r} is not a valid tag name")
    parts = [f'<tool name="{name}">']
    for key, value in args.items():
        if not _NAME.match(key):
            raise ValueError(f"argument name {key!r} is not a valid tag name")
        end = _closing_tag(key, value)
        attr = "" if end == key else f' end="{end}"'
        parts.append(f"<{key}{attr}>{value}</{end}>")
    parts.append(_TOOL_CLOSE)
    return "".join(parts)


def parse_message(text: str) -> list[ToolCall]:
    """Every ``<tool name=...>`` block in ``text``, in order; malformed ones carry ``error``."""
    calls: list[ToolCall] = []
    pos = 0
    while (m := _TOOL_OPEN.search(text, pos)) is not None:
        index = len(calls) + 1
        name = m.group(1) if m.group(1) is not None else m.group(2)
        call, pos = _parse_body(text, m.end(), index, name.strip())
        call.raw = text[m.start() : pos]
        calls.append(call)
    return calls


def _parse_body(text: str, pos: int, index: int, name: str) -> tuple[ToolCall, int]:
    """Parse arguments from ``pos`` to ``</tool>``; return the call and the position after it."""
    call = ToolCall(index=index, name=name)
    where = f"call {index} ({name or 'unnamed'})"
    if not name:
        call.error = f'{where}: <tool> has an empty name attribute; write <tool name="TOOL">'
    while True:
        pos = _SPACE.match(text, pos).end()
        if text.startswith(_TOOL_CLOSE, pos):
            return call, pos + len(_TOOL_CLOSE)
        if pos >= len(text):
            call.error = call.error or f"{where}: missing </tool> at the end of the message"
            return call, pos
        m = _ARG_OPEN.match(text, pos)
        if m is None:
            # Stray text inside the call: report it and skip to this call's </tool>.
            snippet = text[pos : pos + 40].split("\n")[0]
            close = text.find(_TOOL_CLOSE, pos)
            call.error = call.error or (
                f"{where}: expected an argument tag like <path> or </tool>, found {snippet!r}"
            )
            return call, (len(text) if close < 0 else close + len(_TOOL_CLOSE))
        arg = m.group(1)
        end = m.group(2) if m.group(2) is not None else m.group(3)
        end = (end or arg).strip()
        close_tag = f"</{end}>"
        close = text.find(close_tag, m.end())
        if close < 0:
            call.error = (
                call.error or f"{where}: argument <{arg}> is never closed (expected {close_tag})"
            )
            tool_close = text.find(_TOOL_CLOSE, m.end())
            return call, (len(text) if tool_close < 0 else tool_close + len(_TOOL_CLOSE))
        if arg in call.args:
            call.error = call.error or f"{where}: argument <{arg}> is given twice"
        else:
            call.args[arg] = text[m.end() : close]
        pos = close + len(close_tag)


def render_tool_specs(specs: list[ToolSpec]) -> str:
    """The tools section of the system prompt: format rules, then one entry per tool."""
    lines = [
        "You can call tools. Write each call as XML:",
        '<tool name="TOOL_NAME"><ARG>value</ARG>...</tool>',
        "Argument values are raw text up to their closing tag: write code as it is, no escaping.",
        'If a value must contain its own closing tag, name another one: <content end="content_1">'
        "...</content_1>.",
        "All calls in one message run at the same time; put calls that depend on each other's",
        "results in separate messages. Results come back as <tool_result> blocks.",
        "When the task is done, reply with a short summary and no tool calls.",
        "",
        "Tools:",
    ]
    for spec in specs:
        lines.append(f"## {spec.name}")
        lines.append(spec.description)
        for p in spec.params:
            flag = "required" if p.required else "optional"
            lines.append(f"- <{p.name}> ({flag}): {p.description}")
        example = {p.name: "..." for p in spec.params if p.required}
        lines.append(f"Example: {render_call(spec.name, example)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_result(result: ToolResult) -> str:
    """One ``<tool_result>`` block, exactly as the model sees it."""
    status = ' status="error"' if result.is_error else ""
    return (
        f'<tool_result name="{result.name}" index="{result.index}"{status}>\n'
        f"{result.output}\n</tool_result>"
    )


def render_results(results: list[ToolResult]) -> str:
    """All results of one message, in call order, as one user message."""
    return "\n".join(render_result(r) for r in results)
