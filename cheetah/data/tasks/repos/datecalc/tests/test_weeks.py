import datetime

import pytest

from datecalc.core import Date, add_days
from datecalc.weeks import (
    add_business_days,
    business_days_between,
    count_weekdays,
    is_business_day,
    is_weekend,
    iso_week,
    next_business_day,
    week_start,
    weeks_in_year,
)

# Friday 2024-03-29 (Good Friday) and Monday 2024-04-01 (Easter Monday).
HOLIDAYS = frozenset({Date(2024, 3, 29), Date(2024, 4, 1)})


def test_iso_week_matches_datetime():
    start = datetime.date(2019, 12, 20)
    for i in range(800):
        ref = start + datetime.timedelta(days=i)
        d = Date(ref.year, ref.month, ref.day)
        y, w, _ = ref.isocalendar()
        assert iso_week(d) == (y, w), d


def test_iso_week_year_boundaries():
    assert iso_week(Date(2024, 12, 30)) == (2025, 1)
    assert iso_week(Date(2021, 1, 3)) == (2020, 53)
    assert iso_week(Date(2021, 1, 4)) == (2021, 1)
    assert iso_week(Date(2024, 1, 1)) == (2024, 1)


def test_weeks_in_year():
    assert weeks_in_year(2020) == 53
    assert weeks_in_year(2015) == 53
    assert weeks_in_year(2024) == 52
    assert weeks_in_year(2021) == 52


def test_week_start():
    assert week_start(Date(2024, 5, 15)) == Date(2024, 5, 13)
    assert week_start(Date(2024, 5, 13)) == Date(2024, 5, 13)
    assert week_start(Date(2024, 5, 12)) == Date(2024, 5, 6)


def test_weekends_and_business_days():
    assert not is_weekend(Date(2024, 5, 17))  # Friday
    assert is_weekend(Date(2024, 5, 18))
    assert is_weekend(Date(2024, 5, 19))
    assert not is_weekend(Date(2024, 5, 20))
    assert is_business_day(Date(2024, 3, 28), HOLIDAYS)
    assert not is_business_day(Date(2024, 3, 29), HOLIDAYS)
    assert is_business_day(Date(2024, 3, 29))
    assert not is_business_day(Date(2024, 3, 30))


def test_next_business_day():
    assert next_business_day(Date(2024, 5, 15)) == Date(2024, 5, 16)
    assert next_business_day(Date(2024, 5, 17)) == Date(2024, 5, 20)
    assert next_business_day(Date(2024, 5, 18)) == Date(2024, 5, 20)
    assert next_business_day(Date(2024, 3, 28), HOLIDAYS) == Date(2024, 4, 2)


@pytest.mark.parametrize(
    "start, n, expected",
    [
        (Date(2024, 5, 15), 1, Date(2024, 5, 16)),
        (Date(2024, 5, 15), 3, Date(2024, 5, 20)),
        (Date(2024, 5, 18), 1, Date(2024, 5, 20)),
        (Date(2024, 5, 15), 0, Date(2024, 5, 15)),
        (Date(2024, 5, 18), 0, Date(2024, 5, 18)),
        (Date(2024, 5, 20), -1, Date(2024, 5, 17)),
        (Date(2024, 5, 19), -1, Date(2024, 5, 17)),
        (Date(2024, 5, 15), -7, Date(2024, 5, 6)),
    ],
)
def test_add_business_days(start, n, expected):
    assert add_business_days(start, n) == expected


def test_add_business_days_skips_holidays():
    assert add_business_days(Date(2024, 3, 28), 1, HOLIDAYS) == Date(2024, 4, 2)
    assert add_business_days(Date(2024, 4, 2), -1, HOLIDAYS) == Date(2024, 3, 28)


def brute_weekdays(start, end):
    n, d = 0, start
    while d < end:
        n += d.weekday() < 5
        d += datetime.timedelta(days=1)
    return n


def test_count_weekdays_matches_brute_force():
    base = datetime.date(2024, 5, 13)  # a Monday
    for offset in range(7):
        start = base + datetime.timedelta(days=offset)
        for length in range(16):
            end = start + datetime.timedelta(days=length)
            got = count_weekdays(
                Date(start.year, start.month, start.day), Date(end.year, end.month, end.day)
            )
            assert got == brute_weekdays(start, end), (start, length)


def test_count_weekdays_examples():
    assert count_weekdays(Date(2024, 5, 13), Date(2024, 5, 20)) == 5
    assert count_weekdays(Date(2024, 5, 13), Date(2024, 5, 13)) == 0
    assert count_weekdays(Date(2024, 5, 18), Date(2024, 5, 20)) == 0
    with pytest.raises(ValueError):
        count_weekdays(Date(2024, 5, 20), Date(2024, 5, 13))


def test_business_days_between():
    start, end = Date(2024, 3, 25), Date(2024, 4, 8)
    assert business_days_between(start, end) == 10
    assert business_days_between(start, end, HOLIDAYS) == 8
    assert business_days_between(end, start, HOLIDAYS) == -8
    assert business_days_between(start, start, HOLIDAYS) == 0


def test_business_days_between_holiday_at_the_edges():
    # The start is counted and the end is not, so only a holiday at the start matters.
    assert business_days_between(Date(2024, 3, 29), Date(2024, 4, 1), HOLIDAYS) == 0
    assert business_days_between(Date(2024, 3, 28), Date(2024, 3, 29), HOLIDAYS) == 1
    assert business_days_between(Date(2024, 4, 1), Date(2024, 4, 3), HOLIDAYS) == 1
    weekend_holiday = {Date(2024, 3, 30)}
    assert business_days_between(Date(2024, 3, 25), Date(2024, 4, 1), weekend_holiday) == 5


def test_business_days_agree_with_add_business_days():
    start = Date(2024, 3, 20)
    for n in range(1, 12):
        end = add_business_days(start, n, HOLIDAYS)
        assert business_days_between(add_days(start, 1), add_days(end, 1), HOLIDAYS) == n
