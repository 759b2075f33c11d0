import pytest

from datecalc.clock import (
    MINUTES_PER_DAY,
    SECONDS_PER_DAY,
    add_minutes,
    format_duration,
    format_hhmm,
    free_slots,
    minutes_until,
    overlaps,
    parse_hhmm,
    split_seconds,
    to_12h,
)


def test_constants():
    assert MINUTES_PER_DAY == 1440
    assert SECONDS_PER_DAY == 86400


@pytest.mark.parametrize(
    "text, minutes",
    [("00:00", 0), ("09:30", 570), ("9:05", 545), ("23:59", 1439), (" 12:00 ", 720)],
)
def test_parse_hhmm(text, minutes):
    assert parse_hhmm(text) == minutes


@pytest.mark.parametrize(
    "text", ["24:00", "12:60", "1230", ":30", "123:00", "12:5", "12:345", "ab:cd", "-1:30"]
)
def test_parse_hhmm_rejects(text):
    with pytest.raises(ValueError):
        parse_hhmm(text)


def test_format_hhmm():
    assert format_hhmm(570) == "09:30"
    assert format_hhmm(0) == "00:00"
    assert format_hhmm(1439) == "23:59"
    assert format_hhmm(1440 + 61) == "01:01"
    assert format_hhmm(-30) == "23:30"


@pytest.mark.parametrize(
    "minutes, text",
    [
        (0, "12:00 AM"),
        (59, "12:59 AM"),
        (60, "1:00 AM"),
        (719, "11:59 AM"),
        (720, "12:00 PM"),
        (780, "1:00 PM"),
        (1439, "11:59 PM"),
    ],
)
def test_to_12h(minutes, text):
    assert to_12h(minutes) == text


def test_add_minutes_wraps():
    assert add_minutes(600, 45) == 645
    assert add_minutes(1400, 60) == 20
    assert add_minutes(30, -60) == 1410


def test_minutes_until():
    assert minutes_until(540, 600) == 60
    assert minutes_until(1380, 60) == 120
    assert minutes_until(600, 600) == 0
    assert minutes_until(601, 600) == 1439


def test_split_seconds():
    assert split_seconds(0) == (0, 0, 0, 0)
    assert split_seconds(59) == (0, 0, 0, 59)
    assert split_seconds(3661) == (0, 1, 1, 1)
    assert split_seconds(93784) == (1, 2, 3, 4)
    assert split_seconds(2 * 86400 + 7322) == (2, 2, 2, 2)
    with pytest.raises(ValueError):
        split_seconds(-1)


def test_format_duration():
    assert format_duration(0) == "00:00:00"
    assert format_duration(3725) == "01:02:05"
    assert format_duration(86399) == "23:59:59"
    assert format_duration(86400) == "1d 00:00:00"
    assert format_duration(93784) == "1d 02:03:04"
    assert format_duration(-93784) == "-1d 02:03:04"
    assert format_duration(-5) == "-00:00:05"


def test_overlaps_half_open():
    assert overlaps((540, 600), (570, 630))
    assert overlaps((570, 630), (540, 600))
    assert overlaps((540, 600), (560, 580))
    assert not overlaps((540, 600), (600, 660))
    assert not overlaps((600, 660), (540, 600))


def test_free_slots():
    busy = [(600, 660), (540, 570), (700, 720)]
    assert free_slots(busy, 540, 780) == [(570, 600), (660, 700), (720, 780)]
    assert free_slots(busy, 540, 780, min_length=40) == [(660, 700), (720, 780)]
    assert free_slots(busy, 540, 780, min_length=41) == [(720, 780)]
    assert free_slots([], 540, 600) == [(540, 600)]


def test_free_slots_exact_lengths_and_edges():
    busy = [(500, 545), (600, 650), (620, 630), (770, 900)]
    assert free_slots(busy, 540, 780, min_length=55) == [(545, 600), (650, 770)]
    assert free_slots(busy, 540, 780, min_length=56) == [(650, 770)]
    assert free_slots(busy, 540, 780, min_length=120) == [(650, 770)]
    assert free_slots(busy, 540, 780, min_length=121) == []
    assert free_slots([(540, 780)], 540, 780) == []
    assert free_slots([(540, 720)], 540, 780, min_length=60) == [(720, 780)]
    assert free_slots([(540, 720)], 540, 780, min_length=61) == []
    assert free_slots([(800, 900)], 540, 780) == [(540, 780)]
