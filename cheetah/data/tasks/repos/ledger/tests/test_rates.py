import pytest

from ledger.money import Money
from ledger.rates import RateTable


def table():
    t = RateTable()
    t.set("EUR", "USD", "1.10")
    t.set("USD", "JPY", "150")
    return t


def test_convert_direct_and_inverse():
    t = table()
    assert t.convert(Money(1000, "EUR"), "USD") == Money(1100, "USD")
    assert t.convert(Money(1100, "USD"), "EUR") == Money(1000, "EUR")


def test_convert_to_zero_decimal_currency():
    assert table().convert(Money(199, "USD"), "JPY") == Money(298, "JPY")


def test_missing_rate_and_bad_rate():
    with pytest.raises(KeyError):
        table().rate("GBP", "USD")
    with pytest.raises(ValueError):
        RateTable().set("A", "B", "0")
