"""Sorting algorithms. All are stable and return new lists."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Key = Callable[[Any], Any]


def _identity(x: Any) -> Any:
    return x


def insertion_sort(items: Iterable[Any], key: Key | None = None) -> list[Any]:
    """Stable insertion sort; fine for short lists."""
    key = key or _identity
    out = list(items)
    for i in range(1, len(out)):
        current = out[i]
        j = i - 1
        while j >= 0 and key(out[j]) > key(current):
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = current
    return out


def merge(left: list[Any], right: list[Any], key: Key | None = None) -> list[Any]:
    """Merge two sorted lists into one sorted list (stable: ties keep left first)."""
    key = key or _identity
    out: list[Any] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if key(left[i]) <= key(right[j]):
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out


def merge_sort(items: Iterable[Any], key: Key | None = None) -> list[Any]:
    """Stable top-down merge sort."""
    data = list(items)
    if len(data) <= 1:
        return data
    mid = len(data) // 2
    return merge(merge_sort(data[:mid], key), merge_sort(data[mid:], key), key)


def is_sorted(items: Iterable[Any], key: Key | None = None) -> bool:
    """Whether ``items`` is in non-decreasing order."""
    key = key or _identity
    data = [key(x) for x in items]
    return all(a <= b for a, b in zip(data, data[1:]))
