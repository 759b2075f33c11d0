"""Exact money amounts and a double-entry ledger."""

from ledger.money import CurrencyMismatch, Money

__all__ = ["CurrencyMismatch", "Money"]
