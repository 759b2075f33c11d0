import datetime

import pytest

from datecalc.core import (
    Date,
    add_days,
    day_of_year,
    days_between,
    days_in_month,
    days_in_year,
    from_day_of_year,
    from_ordinal,
    is_leap_year,
    is_valid,
    parse_date,
    to_ordinal,
    weekday,
)


def span(start, days):
    """Dates from ``start`` (a datetime.date) for ``days`` days, as (date, Date)."""
    for i in range(days):
        ref = start + datetime.timedelta(days=i)
        yield ref, Date(ref.year, ref.month, ref.day)


SAMPLE = [
    *span(datetime.date(1, 1, 1), 800),
    *span(datetime.date(1899, 12, 1), 120),
    *span(datetime.date(1999, 12, 1), 500),
    *span(datetime.date(2100, 1, 1), 90),
    *span(datetime.date(9999, 12, 1), 31),
]


@pytest.mark.parametrize(
    "year, leap",
    [(2024, True), (2023, False), (2000, True), (1900, False), (2100, False), (2400, True)],
)
def test_is_leap_year(year, leap):
    assert is_leap_year(year) is leap


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2024, 4) == 30
    assert days_in_month(2024, 12) == 31
    with pytest.raises(ValueError):
        days_in_month(2024, 0)
    with pytest.raises(ValueError):
        days_in_month(2024, 13)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365


@pytest.mark.parametrize(
    "d, ok",
    [
        (Date(2024, 2, 29), True),
        (Date(2023, 2, 29), False),
        (Date(2023, 1, 1), True),
        (Date(2023, 12, 31), True),
        (Date(2023, 4, 31), False),
        (Date(2023, 1, 0), False),
        (Date(2023, 0, 10), False),
        (Date(2023, 13, 10), False),
        (Date(1, 1, 1), True),
        (Date(0, 12, 31), False),
        (Date(9999, 12, 31), True),
        (Date(10000, 1, 1), False),
    ],
)
def test_is_valid(d, ok):
    assert is_valid(d) is ok


def test_parse_date():
    assert parse_date(" 2024-02-29 ") == Date(2024, 2, 29)
    assert str(Date(987, 6, 5)) == "0987-06-05"
    for bad in ["2023-02-29", "2024-2", "2024-02-03-04", "2024-0x-01", "2024/02/03"]:
        with pytest.raises(ValueError):
            parse_date(bad)


def test_day_of_year_examples():
    assert day_of_year(Date(2023, 1, 1)) == 1
    assert day_of_year(Date(2024, 2, 29)) == 60
    assert day_of_year(Date(2024, 3, 1)) == 61
    assert day_of_year(Date(2023, 3, 1)) == 60
    assert day_of_year(Date(2024, 12, 31)) == 366


def test_from_day_of_year_examples_and_range():
    assert from_day_of_year(2024, 60) == Date(2024, 2, 29)
    assert from_day_of_year(2023, 60) == Date(2023, 3, 1)
    assert from_day_of_year(2024, 366) == Date(2024, 12, 31)
    assert from_day_of_year(2024, 1) == Date(2024, 1, 1)
    with pytest.raises(ValueError):
        from_day_of_year(2023, 366)
    with pytest.raises(ValueError):
        from_day_of_year(2023, 0)


def test_ordinals_match_datetime():
    for ref, d in SAMPLE:
        assert to_ordinal(d) == ref.toordinal(), d
        assert from_ordinal(ref.toordinal()) == d, d


def test_ordinal_edges():
    assert to_ordinal(Date(1, 1, 1)) == 1
    assert from_ordinal(1) == Date(1, 1, 1)
    assert from_ordinal(366) == Date(2, 1, 1)
    with pytest.raises(ValueError):
        from_ordinal(0)


def test_day_of_year_round_trips_against_datetime():
    for ref, d in SAMPLE:
        n = ref.timetuple().tm_yday
        assert day_of_year(d) == n, d
        assert from_day_of_year(d.year, n) == d, d


def test_weekday_matches_datetime():
    assert weekday(Date(2024, 1, 1)) == 0
    assert weekday(Date(2024, 1, 7)) == 6
    for ref, d in SAMPLE:
        assert weekday(d) == ref.weekday(), d


def test_add_days_and_days_between():
    assert add_days(Date(2024, 2, 28), 1) == Date(2024, 2, 29)
    assert add_days(Date(2023, 2, 28), 1) == Date(2023, 3, 1)
    assert add_days(Date(2024, 1, 1), -1) == Date(2023, 12, 31)
    assert add_days(Date(2024, 1, 1), 366) == Date(2025, 1, 1)
    assert days_between(Date(2024, 1, 1), Date(2025, 1, 1)) == 366
    assert days_between(Date(2025, 1, 1), Date(2024, 1, 1)) == -366
    assert days_between(Date(2024, 3, 1), Date(2024, 3, 1)) == 0
