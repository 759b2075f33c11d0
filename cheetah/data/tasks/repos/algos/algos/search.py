"""Searching sorted sequences."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def bisect_left(items: Sequence[Any], target: Any) -> int:
    """Index of the first element not less than ``target`` (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def bisect_right(items: Sequence[Any], target: Any) -> int:
    """Index just past the last element not greater than ``target``."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if target < items[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def binary_search(items: Sequence[Any], target: Any) -> int:
    """Index of ``target`` in sorted ``items``, or -1 when it is absent."""
    i = bisect_left(items, target)
    if i < len(items) and items[i] == target:
        return i
    return -1


def count_in_range(items: Sequence[Any], low: Any, high: Any) -> int:
    """How many elements x of sorted ``items`` satisfy low <= x <= high."""
    if high < low:
        return 0
    return bisect_right(items, high) - bisect_left(items, low)


def first_true(lo: int, hi: int, predicate: Callable[[int], bool]) -> int:
    """Smallest i in [lo, hi) with predicate(i) true, for a monotone predicate; hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
