import pytest

from ledger.book import Ledger, UnbalancedTransaction
from ledger.money import Money


def test_transfer_moves_money():
    book = Ledger()
    book.post("opening", [("assets:bank", Money(10000, "USD")), ("equity", Money(-10000, "USD"))])
    book.transfer("assets:bank", "expenses:food", Money(2500, "USD"))
    assert book.balance("assets:bank", "USD") == Money(7500, "USD")
    assert book.balance("expenses", "USD") == Money(2500, "USD")


def test_balance_includes_subaccounts_only():
    book = Ledger()
    book.post("x", [("assets:bank", Money(5, "USD")), ("assetsx", Money(-5, "USD"))])
    assert book.balance("assets", "USD") == Money(5, "USD")


def test_unbalanced_is_rejected():
    with pytest.raises(UnbalancedTransaction):
        Ledger().post("bad", [("a", Money(5, "USD")), ("b", Money(-4, "USD"))])


def test_transfer_must_be_positive():
    with pytest.raises(ValueError):
        Ledger().transfer("a", "b", Money(0, "USD"))


def test_accounts_sorted():
    book = Ledger()
    book.transfer("b", "a", Money(1, "EUR"))
    assert book.accounts() == ["a", "b"]
