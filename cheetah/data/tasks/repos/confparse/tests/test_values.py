import pytest

from confparse.values import convert, parse_bool, parse_list, unquote


def test_parse_bool_words():
    assert parse_bool("Yes") is True
    assert parse_bool("off") is False
    with pytest.raises(ValueError):
        parse_bool("maybe")


def test_parse_list():
    assert parse_list("a, b,,c ") == ["a", "b", "c"]


def test_unquote():
    assert unquote('"hi there"') == "hi there"
    assert unquote("'x'") == "x"
    assert unquote("plain") is None


def test_convert_types():
    assert convert("8080") == 8080
    assert convert("0.5") == 0.5
    assert convert("on") is True
    assert convert("1m30s") == 90.0
    assert convert("10MB") == 10_000_000
    assert convert('"007"') == "007"
    assert convert("example.org") == "example.org"
