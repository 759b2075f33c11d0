"""Dates as (year, month, day) and the day arithmetic everything else builds on.

Dates follow the proleptic Gregorian calendar; an *ordinal* counts days so that
0001-01-01 is day 1, as ``datetime.date.toordinal`` does.
"""

from __future__ import annotations

from typing import NamedTuple

_DAYS_BEFORE_MONTH = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class Date(NamedTuple):
    """A calendar date; comparing dates as tuples orders them in time."""

    year: int
    month: int
    day: int

    def __str__(self) -> str:
        """ISO 8601 text, ``YYYY-MM-DD``."""
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


def is_leap_year(year: int) -> bool:
    """Every fourth year, except century years not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    """Number of days in ``month`` (1-12) of ``year``."""
    if month < 1 or month > 12:
        raise ValueError(f"no month {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS_IN_MONTH[month - 1]


def days_in_year(year: int) -> int:
    """366 in a leap year, 365 otherwise."""
    return 366 if is_leap_year(year) else 365


def is_valid(d: Date) -> bool:
    """Whether ``d`` names a real day between 0001-01-01 and 9999-12-31."""
    if d.year < 1 or d.year > 9999:
        return False
    if d.month < 1 or d.month > 12:
        return False
    return d.day >= 1 and d.day <= days_in_month(d.year, d.month)


def parse_date(text: str) -> Date:
    """Parse ``YYYY-MM-DD``; raise ValueError for malformed text or impossible dates."""
    parts = text.strip().split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a YYYY-MM-DD date: {text!r}")
    d = Date(int(parts[0]), int(parts[1]), int(parts[2]))
    if not is_valid(d):
        raise ValueError(f"no such date: {text!r}")
    return d


def day_of_year(d: Date) -> int:
    """1 for January 1st up to 365 (366 in leap years) for December 31st."""
    n = _DAYS_BEFORE_MONTH[d.month - 1] + d.day
    if d.month > 2 and is_leap_year(d.year):
        n += 1
    return n


def from_day_of_year(year: int, n: int) -> Date:
    """The date that is day ``n`` (1-based) of ``year``."""
    if n < 1 or n > days_in_year(year):
        raise ValueError(f"year {year} has no day {n}")
    month = 1
    while n > days_in_month(year, month):
        n -= days_in_month(year, month)
        month += 1
    return Date(year, month, n)


def to_ordinal(d: Date) -> int:
    """Days since 0000-12-31, so that 0001-01-01 is 1."""
    y = d.year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + day_of_year(d)


def from_ordinal(n: int) -> Date:
    """The date with ordinal ``n`` (the inverse of ``to_ordinal``)."""
    if n < 1:
        raise ValueError(f"ordinal {n} is before 0001-01-01")
    year = (n - 1) // 366 + 1  # never past the true year, since no year has 367 days
    while to_ordinal(Date(year + 1, 1, 1)) <= n:
        year += 1
    return from_day_of_year(year, n - to_ordinal(Date(year, 1, 1)) + 1)


def weekday(d: Date) -> int:
    """Day of the week: 0 for Monday up to 6 for Sunday."""
    return (to_ordinal(d) + 6) % 7


def add_days(d: Date, n: int) -> Date:
    """The date ``n`` days after ``d`` (before it when ``n`` is negative)."""
    return from_ordinal(to_ordinal(d) + n)


def days_between(a: Date, b: Date) -> int:
    """Days from ``a`` to ``b``: positive when ``b`` is later."""
    return to_ordinal(b) - to_ordinal(a)
