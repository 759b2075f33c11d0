"""Plain-text rendering of todo items."""

from __future__ import annotations

from todocli.store import Item

TITLE_WIDTH = 40


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in "..." when cut."""
    if len(text) <= width:
        return text
    return text[: width - 3] + "..."


def render_item(item: Item) -> str:
    mark = "x" if item.done else " "
    tags = " " + " ".join(f"#{t}" for t in item.tags) if item.tags else ""
    return f"[{mark}] {item.id:>3}  P{item.priority}  {truncate(item.title, TITLE_WIDTH)}{tags}"


def render_list(items: list[Item]) -> str:
    if not items:
        return "nothing to do"
    return "\n".join(render_item(item) for item in items)


def summary(items: list[Item]) -> str:
    done = sum(1 for i in items if i.done)
    return f"{done}/{len(items)} done"
