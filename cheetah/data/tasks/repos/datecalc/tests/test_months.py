import pytest

from datecalc.core import Date
from datecalc.months import (
    add_months,
    add_years,
    age,
    end_of_month,
    last_weekday,
    months_between,
    nth_weekday,
    quarter,
    quarter_start,
)


@pytest.mark.parametrize(
    "start, n, expected",
    [
        (Date(2024, 1, 15), 1, Date(2024, 2, 15)),
        (Date(2024, 1, 31), 1, Date(2024, 2, 29)),
        (Date(2023, 1, 31), 1, Date(2023, 2, 28)),
        (Date(2024, 11, 30), 2, Date(2025, 1, 30)),
        (Date(2024, 12, 5), 1, Date(2025, 1, 5)),
        (Date(2024, 3, 31), -1, Date(2024, 2, 29)),
        (Date(2024, 1, 10), -1, Date(2023, 12, 10)),
        (Date(2024, 1, 10), -13, Date(2022, 12, 10)),
        (Date(2024, 5, 20), 0, Date(2024, 5, 20)),
        (Date(2024, 5, 20), 25, Date(2026, 6, 20)),
    ],
)
def test_add_months(start, n, expected):
    assert add_months(start, n) == expected


def test_add_years():
    assert add_years(Date(2024, 2, 29), 1) == Date(2025, 2, 28)
    assert add_years(Date(2024, 2, 29), 4) == Date(2028, 2, 29)
    assert add_years(Date(2024, 7, 4), -3) == Date(2021, 7, 4)


@pytest.mark.parametrize(
    "a, b, months",
    [
        (Date(2024, 1, 15), Date(2024, 3, 15), 2),
        (Date(2024, 1, 15), Date(2024, 3, 14), 1),
        (Date(2024, 1, 15), Date(2024, 3, 16), 2),
        (Date(2024, 1, 15), Date(2024, 1, 20), 0),
        (Date(2024, 3, 20), Date(2024, 3, 10), 0),
        (Date(2024, 3, 15), Date(2024, 1, 15), -2),
        (Date(2024, 3, 15), Date(2024, 1, 16), -1),
        (Date(2024, 3, 15), Date(2024, 1, 14), -2),
        (Date(2023, 11, 30), Date(2025, 2, 1), 14),
    ],
)
def test_months_between(a, b, months):
    assert months_between(a, b) == months


def test_age():
    born = Date(1990, 6, 15)
    assert age(born, Date(2024, 6, 14)) == 33
    assert age(born, Date(2024, 6, 15)) == 34
    assert age(born, Date(2024, 7, 1)) == 34
    assert age(born, Date(2024, 5, 30)) == 33
    assert age(born, born) == 0
    with pytest.raises(ValueError):
        age(born, Date(1990, 6, 14))


def test_age_of_leap_day_birthday():
    born = Date(2000, 2, 29)
    assert age(born, Date(2023, 2, 28)) == 22
    assert age(born, Date(2023, 3, 1)) == 23
    assert age(born, Date(2024, 2, 29)) == 24


def test_quarters():
    quarters = [quarter(Date(2024, m, 1)) for m in range(1, 13)]
    assert quarters == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert quarter_start(Date(2024, 1, 31)) == Date(2024, 1, 1)
    assert quarter_start(Date(2024, 5, 20)) == Date(2024, 4, 1)
    assert quarter_start(Date(2024, 9, 30)) == Date(2024, 7, 1)
    assert quarter_start(Date(2024, 12, 31)) == Date(2024, 10, 1)


def test_end_of_month():
    assert end_of_month(Date(2024, 2, 10)) == Date(2024, 2, 29)
    assert end_of_month(Date(2023, 2, 10)) == Date(2023, 2, 28)
    assert end_of_month(Date(2023, 9, 1)) == Date(2023, 9, 30)


def test_nth_weekday():
    # May 2024 starts on a Wednesday (weekday 2).
    assert nth_weekday(2024, 5, 2, 1) == Date(2024, 5, 1)
    assert nth_weekday(2024, 5, 0, 1) == Date(2024, 5, 6)
    assert nth_weekday(2024, 5, 3, 2) == Date(2024, 5, 9)
    assert nth_weekday(2024, 5, 1, 1) == Date(2024, 5, 7)
    assert nth_weekday(2024, 5, 4, 5) == Date(2024, 5, 31)
    assert nth_weekday(2024, 11, 3, 4) == Date(2024, 11, 28)  # Thanksgiving


def test_nth_weekday_out_of_range():
    with pytest.raises(ValueError):
        nth_weekday(2024, 5, 5, 5)  # May 2024 has four Saturdays
    with pytest.raises(ValueError):
        nth_weekday(2024, 5, 2, 0)


def test_last_weekday():
    assert last_weekday(2024, 5, 0) == Date(2024, 5, 27)  # Memorial Day
    assert last_weekday(2024, 5, 4) == Date(2024, 5, 31)
    assert last_weekday(2024, 5, 5) == Date(2024, 5, 25)
    assert last_weekday(2024, 2, 3) == Date(2024, 2, 29)
    assert last_weekday(2024, 2, 4) == Date(2024, 2, 23)
