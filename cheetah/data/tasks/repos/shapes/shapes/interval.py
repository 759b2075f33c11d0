"""Closed intervals ``[lo, hi]`` on the real line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    """The closed interval [lo, hi]; ``lo`` must not exceed ``hi``."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"empty interval: {self.lo} > {self.hi}")

    @property
    def length(self) -> float:
        """Distance from ``lo`` to ``hi``."""
        return self.hi - self.lo

    @property
    def midpoint(self) -> float:
        """The centre of the interval."""
        return (self.lo + self.hi) / 2

    def is_degenerate(self) -> bool:
        """Whether the interval is a single point."""
        return self.lo == self.hi

    def contains(self, x: float) -> bool:
        """Whether lo <= x <= hi."""
        return self.lo <= x and x <= self.hi

    def contains_interval(self, other: Interval) -> bool:
        """Whether ``other`` lies entirely inside this interval (shared ends allowed)."""
        return self.lo <= other.lo and other.hi <= self.hi

    def overlaps(self, other: Interval) -> bool:
        """Whether the intervals share at least one point (touching ends count)."""
        return self.lo <= other.hi and other.lo <= self.hi

    def intersection(self, other: Interval) -> Interval | None:
        """The common part, or None when the intervals are disjoint."""
        lo = max(self.lo, other.lo)
        hi = min(self.hi, other.hi)
        if lo > hi:
            return None
        return Interval(lo, hi)

    def gap(self, other: Interval) -> float | None:
        """Length of the space between two disjoint intervals; None if they meet."""
        if self.hi < other.lo:
            return other.lo - self.hi
        if other.hi < self.lo:
            return self.lo - other.hi
        return None

    def scale(self, factor: float) -> Interval:
        """The interval stretched by ``factor`` about its midpoint (factor >= 0)."""
        if factor < 0:
            raise ValueError("factor must not be negative")
        half = self.length / 2 * factor
        mid = self.midpoint
        return Interval(mid - half, mid + half)

    def split(self, at: float) -> tuple[Interval, Interval]:
        """Two pieces [lo, at] and [at, hi]; ``at`` must lie strictly inside."""
        if at <= self.lo or at >= self.hi:
            raise ValueError(f"{at} is not strictly inside {self}")
        return Interval(self.lo, at), Interval(at, self.hi)

    def position(self, x: float) -> float:
        """Where ``x`` falls as a fraction of the interval: 0 at lo, 1 at hi."""
        if self.length == 0:
            raise ValueError("degenerate interval has no positions")
        return (x - self.lo) / self.length


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted union of ``intervals``; overlapping or touching ones are joined."""
    result: list[Interval] = []
    for iv in sorted(intervals):
        if result and iv.lo <= result[-1].hi:
            last = result[-1]
            result[-1] = Interval(last.lo, max(last.hi, iv.hi))
        else:
            result.append(iv)
    return result


def total_length(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``intervals`` (overlaps counted once)."""
    total = 0.0
    for iv in merge(intervals):
        total += iv.hi - iv.lo
    return total


def uncovered(intervals: Iterable[Interval], within: Interval) -> list[Interval]:
    """The parts of ``within`` of positive length that no interval covers."""
    holes: list[Interval] = []
    cursor = within.lo
    for iv in merge(intervals):
        end = min(iv.lo, within.hi)
        if end > cursor:
            holes.append(Interval(cursor, end))
        cursor = max(cursor, iv.hi)
    if cursor < within.hi:
        holes.append(Interval(cursor, within.hi))
    return holes


def count_containing(intervals: Iterable[Interval], x: float) -> int:
    """How many of ``intervals`` contain the point ``x``."""
    count = 0
    for iv in intervals:
        if iv.lo <= x and iv.hi >= x:
            count += 1
    return count
