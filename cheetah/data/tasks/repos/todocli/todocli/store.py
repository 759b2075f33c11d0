"""The todo list and its JSON file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

MIN_PRIORITY, MAX_PRIORITY = 1, 5


@dataclass
class Item:
    id: int
    title: str
    priority: int = 3
    done: bool = False
    tags: list[str] = field(default_factory=list)


class TodoError(Exception):
    """A user error: unknown id, bad priority, empty title."""


class Store:
    """Items in memory; ``load``/``save`` read and write the JSON file."""

    def __init__(self, items: list[Item] | None = None) -> None:
        self.items = items or []

    @classmethod
    def load(cls, path: Path) -> Store:
        if not path.exists():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls([Item(**raw) for raw in data["items"]])

    def save(self, path: Path) -> None:
        data = {"items": [asdict(item) for item in self.items]}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def next_id(self) -> int:
        return max((item.id for item in self.items), default=0) + 1

    def add(self, title: str, priority: int = 3, tags: list[str] | None = None) -> Item:
        title = title.strip()
        if not title:
            raise TodoError("title is empty")
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise TodoError(f"priority must be {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority}")
        item = Item(id=self.next_id(), title=title, priority=priority, tags=sorted(set(tags or [])))
        self.items.append(item)
        return item

    def get(self, item_id: int) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise TodoError(f"no item with id {item_id}")

    def complete(self, item_id: int) -> Item:
        item = self.get(item_id)
        item.done = True
        return item

    def remove(self, item_id: int) -> Item:
        item = self.get(item_id)
        self.items.remove(item)
        return item

    def pending(self, tag: str | None = None) -> list[Item]:
        """Items not done, highest priority (1) first, then by id."""
        items = [i for i in self.items if not i.done and (tag is None or tag in i.tags)]
        return sorted(items, key=lambda i: (i.priority, i.id))
