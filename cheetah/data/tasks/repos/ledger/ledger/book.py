"""A double-entry ledger: every transaction moves money between accounts and sums to zero."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.money import Money


class UnbalancedTransaction(ValueError):
    """The postings of a transaction do not sum to zero."""


@dataclass
class Transaction:
    description: str
    postings: list[tuple[str, Money]] = field(default_factory=list)

    def check(self) -> None:
        if len(self.postings) < 2:
            raise UnbalancedTransaction("a transaction needs at least two postings")
        currencies = {m.currency for _, m in self.postings}
        for cur in currencies:
            total = sum(m.minor for _, m in self.postings if m.currency == cur)
            if total != 0:
                raise UnbalancedTransaction(f"{self.description}: {cur} postings sum to {total}")


class Ledger:
    def __init__(self) -> None:
        self.transactions: list[Transaction] = []

    def post(self, description: str, postings: list[tuple[str, Money]]) -> Transaction:
        tx = Transaction(description, list(postings))
        tx.check()
        self.transactions.append(tx)
        return tx

    def transfer(self, source: str, dest: str, amount: Money, description: str = "") -> None:
        if amount.minor <= 0:
            raise ValueError("transfer amount must be positive")
        self.post(description or f"{source} -> {dest}", [(source, -amount), (dest, amount)])

    def balance(self, account: str, currency: str) -> Money:
        """The balance of ``account`` (and its sub-accounts, "assets:bank" under "assets")."""
        total = 0
        for tx in self.transactions:
            for name, money in tx.postings:
                if money.currency != currency:
                    continue
                if name == account or name.startswith(account + ":"):
                    total += money.minor
        return Money(total, currency)

    def accounts(self) -> list[str]:
        return sorted({name for tx in self.transactions for name, _ in tx.postings})
