import pytest

from confparse.units import format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("1m30s", 90), ("1h30m", 5400), ("250ms", 0.25), ("1.5h", 5400), ("2d", 172800)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_rejects_garbage():
    with pytest.raises(ValueError):
        parse_duration("10 parsecs")
    with pytest.raises(ValueError):
        parse_duration("")


@pytest.mark.parametrize(
    ("text", "size"), [("42", 42), ("10MB", 10_000_000), ("512 KiB", 524288), ("1GiB", 2**30)]
)
def test_parse_size(text, size):
    assert parse_size(text) == size


def test_format_duration():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(90061) == "1d1h1m1s"
