"""Month, quarter and year arithmetic."""

from __future__ import annotations

from datecalc.core import Date, days_in_month, weekday


def add_months(d: Date, n: int) -> Date:
    """The same day ``n`` months later (earlier if negative), clamped to the month's end."""
    total = d.year * 12 + (d.month - 1) + n
    year = total // 12
    month = total - year * 12 + 1
    return Date(year, month, min(d.day, days_in_month(year, month)))


def add_years(d: Date, n: int) -> Date:
    """The same day ``n`` years later; February 29th becomes the 28th in common years."""
    return add_months(d, n * 12)


def months_between(a: Date, b: Date) -> int:
    """Whole months from ``a`` to ``b`` (negative when ``b`` is earlier); a month counts
    only once the day of the month is reached again."""
    months = (b.year - a.year) * 12 + (b.month - a.month)
    if months > 0 and b.day < a.day:
        months -= 1
    elif months < 0 and b.day > a.day:
        months += 1
    return months


def age(born: Date, on: Date) -> int:
    """Completed years between a birth date and ``on`` (a February 29th birthday is
    reached on March 1st in common years)."""
    if on < born:
        raise ValueError("not born yet")
    years = on.year - born.year
    if (on.month, on.day) < (born.month, born.day):
        years -= 1
    return years


def quarter(d: Date) -> int:
    """Quarter of the year, 1-4."""
    return (d.month - 1) // 3 + 1


def quarter_start(d: Date) -> Date:
    """First day of the quarter holding ``d``."""
    return Date(d.year, 3 * (quarter(d) - 1) + 1, 1)


def end_of_month(d: Date) -> Date:
    """Last day of the month holding ``d``."""
    return Date(d.year, d.month, days_in_month(d.year, d.month))


def nth_weekday(year: int, month: int, wd: int, n: int) -> Date:
    """The ``n``-th (1-based) weekday ``wd`` (0 = Monday) of a month, e.g. the second
    Tuesday; raise ValueError when the month has no such day."""
    first = weekday(Date(year, month, 1))
    day = 1 + (wd - first) % 7 + (n - 1) * 7
    if n < 1 or day > days_in_month(year, month):
        raise ValueError(f"no weekday {wd} number {n} in {year}-{month:02d}")
    return Date(year, month, day)


def last_weekday(year: int, month: int, wd: int) -> Date:
    """The last weekday ``wd`` (0 = Monday) of a month."""
    last = days_in_month(year, month)
    back = (weekday(Date(year, month, last)) - wd) % 7
    return Date(year, month, last - back)
