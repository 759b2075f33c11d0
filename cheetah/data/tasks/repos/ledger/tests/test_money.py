import pytest

from ledger.money import CurrencyMismatch, Money


def usd(text):
    return Money.parse(text, "USD")


def test_parse_rounds_half_even():
    assert usd("12.345").minor == 1234
    assert usd("12.355").minor == 1236
    assert Money.parse("1,000", "JPY").minor == 1000


def test_add_sub_and_mismatch():
    assert usd("1.50") + usd("2.25") == usd("3.75")
    assert usd("1.50") - usd("2.25") == usd("-0.75")
    with pytest.raises(CurrencyMismatch):
        usd("1") + Money.parse("1", "EUR")


def test_comparisons():
    assert usd("1") < usd("2")
    assert usd("2") <= usd("2")


def test_times_rounds():
    assert usd("10.00").times("0.075") == usd("0.75")
    assert usd("0.05").times(3) == usd("0.15")


def test_allocate_keeps_every_cent():
    shares = usd("100.00").allocate([1, 1, 1])
    assert [s.minor for s in shares] == [3334, 3333, 3333]
    assert sum(s.minor for s in shares) == 10000


def test_allocate_rejects_zero_ratios():
    with pytest.raises(ValueError):
        usd("1").allocate([0, 0])


def test_format():
    assert usd("1234567.5").format() == "1,234,567.50 USD"
    assert usd("-0.07").format() == "-0.07 USD"
    assert Money(1500, "JPY").format(thousands=" ") == "1 500 JPY"
