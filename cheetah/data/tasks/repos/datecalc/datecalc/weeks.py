"""ISO weeks, weekends and business days (Monday to Friday, minus holidays)."""

from __future__ import annotations

from collections.abc import Collection

from datecalc.core import Date, add_days, day_of_year, days_between, weekday

NO_HOLIDAYS: frozenset[Date] = frozenset()


def iso_week(d: Date) -> tuple[int, int]:
    """ISO 8601 (week-based year, week number): weeks start on Monday and week 1 is
    the one holding the year's first Thursday."""
    thursday = add_days(d, 3 - weekday(d))
    return thursday.year, (day_of_year(thursday) - 1) // 7 + 1


def weeks_in_year(year: int) -> int:
    """52 or 53: the number of ISO weeks in a week-based year."""
    return iso_week(Date(year, 12, 28))[1]


def week_start(d: Date) -> Date:
    """The Monday on or before ``d``."""
    return add_days(d, 0 - weekday(d))


def is_weekend(d: Date) -> bool:
    """Whether ``d`` is a Saturday or a Sunday."""
    return weekday(d) >= 5


def is_business_day(d: Date, holidays: Collection[Date] = NO_HOLIDAYS) -> bool:
    """A weekday that is not one of ``holidays``."""
    return not is_weekend(d) and d not in holidays


def next_business_day(d: Date, holidays: Collection[Date] = NO_HOLIDAYS) -> Date:
    """The first business day strictly after ``d``."""
    d = add_days(d, 1)
    while not is_business_day(d, holidays):
        d = add_days(d, 1)
    return d


def add_business_days(d: Date, n: int, holidays: Collection[Date] = NO_HOLIDAYS) -> Date:
    """Move ``n`` business days forward (backward if negative); ``d`` itself may be any
    day and is not counted."""
    step = 1 if n > 0 else -1
    remaining = abs(n)
    while remaining > 0:
        d = add_days(d, step)
        if is_business_day(d, holidays):
            remaining -= 1
    return d


def count_weekdays(start: Date, end: Date) -> int:
    """Number of Mondays to Fridays in [start, end); ``end`` must not precede ``start``."""
    days = days_between(start, end)
    if days < 0:
        raise ValueError("end is before start")
    count = days // 7 * 5
    first = weekday(start)
    for i in range(days % 7):
        if (first + i) % 7 < 5:
            count += 1
    return count


def business_days_between(start: Date, end: Date, holidays: Collection[Date] = NO_HOLIDAYS) -> int:
    """Business days in [start, end), negated when ``end`` comes before ``start``."""
    if end < start:
        return -business_days_between(end, start, holidays)
    count = count_weekdays(start, end)
    for h in set(holidays):
        if start <= h and h < end and weekday(h) < 5:
            count -= 1
    return count
