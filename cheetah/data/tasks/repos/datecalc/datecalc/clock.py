"""Clock times as minutes after midnight, and durations in seconds."""

from __future__ import annotations

MINUTES_PER_DAY = 24 * 60
SECONDS_PER_DAY = MINUTES_PER_DAY * 60


def parse_hhmm(text: str) -> int:
    """``"09:30"`` -> 570 minutes after midnight; hours 0-23 and two-digit minutes 0-59."""
    hh, sep, mm = text.strip().partition(":")
    if sep != ":" or len(hh) == 0 or len(hh) > 2 or len(mm) != 2:
        raise ValueError(f"not an HH:MM time: {text!r}")
    if not hh.isdigit() or not mm.isdigit():
        raise ValueError(f"not an HH:MM time: {text!r}")
    hours, minutes = int(hh), int(mm)
    if hours >= 24 or minutes >= 60:
        raise ValueError(f"time out of range: {text!r}")
    return hours * 60 + minutes


def format_hhmm(minutes: int) -> str:
    """570 -> ``"09:30"``; values outside one day wrap around midnight."""
    minutes %= MINUTES_PER_DAY
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def to_12h(minutes: int) -> str:
    """A clock time on the 12-hour clock: 0 -> ``"12:00 AM"``, 780 -> ``"1:00 PM"``."""
    hours = minutes // 60
    suffix = "AM" if hours < 12 else "PM"
    shown = hours % 12
    if shown == 0:
        shown = 12
    return f"{shown}:{minutes % 60:02d} {suffix}"


def add_minutes(clock: int, delta: int) -> int:
    """The clock time ``delta`` minutes after ``clock``, wrapping around midnight."""
    return (clock + delta) % MINUTES_PER_DAY


def minutes_until(start: int, end: int) -> int:
    """Minutes forward from clock time ``start`` to ``end``, past midnight if need be;
    0 when they are equal."""
    diff = end - start
    if diff < 0:
        diff += MINUTES_PER_DAY
    return diff


def split_seconds(total: int) -> tuple[int, int, int, int]:
    """(days, hours, minutes, seconds) of a non-negative number of seconds."""
    if total < 0:
        raise ValueError("negative duration")
    days = total // SECONDS_PER_DAY
    rest = total - days * SECONDS_PER_DAY
    hours = rest // 3600
    rest -= hours * 3600
    minutes = rest // 60
    return days, hours, minutes, rest - minutes * 60


def format_duration(seconds: int) -> str:
    """``"1d 02:03:04"``; the day part only when there are days, ``-`` when negative."""
    sign = "-" if seconds < 0 else ""
    days, h, m, s = split_seconds(abs(seconds))
    body = f"{h:02d}:{m:02d}:{s:02d}"
    if days > 0:
        body = f"{days}d {body}"
    return sign + body


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two half-open slots [start, end) of the same day share a minute."""
    return a[0] < b[1] and b[0] < a[1]


def free_slots(
    busy: list[tuple[int, int]], day_start: int, day_end: int, min_length: int = 1
) -> list[tuple[int, int]]:
    """Gaps of at least ``min_length`` minutes in [day_start, day_end) that no busy slot
    [start, end) covers, in order."""
    gaps: list[tuple[int, int]] = []
    cursor = day_start
    for start, end in sorted(busy):
        start = min(start, day_end)
        if start - cursor >= min_length:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if day_end - cursor >= min_length:
        gaps.append((cursor, day_end))
    return gaps
