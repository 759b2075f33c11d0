"""Tasks on benchmarks/repos/ledger (exact money and a double-entry ledger)."""

from build import Bug, Change, WriteTests

R = "ledger"

TRANSACTION_OLD = '''class UnbalancedTransaction(ValueError):
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


'''

TRANSACTION_MODULE = (
    '''"""A transaction: postings (account, amount) that sum to zero in every currency."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.money import Money


'''
    + TRANSACTION_OLD.rstrip()
    + "\n"
)

FROM_STRING = '''
    @classmethod
    def from_string(cls, text: str) -> Money:
        """"$12.50", "€3", "¥500" or "12.50 USD" (a code after the number)."""
        s = text.strip()
        for symbol, currency in SYMBOLS.items():
            if s.startswith(symbol):
                return cls.parse(s[len(symbol) :], currency)
        number, _, code = s.rpartition(" ")
        if not number or code not in MINOR_UNITS:
            raise ValueError(f"cannot read an amount from {text!r}")
        return cls.parse(number, code)
'''

STATEMENT = '''
    def statement(self, account: str, currency: str) -> list[tuple[str, Money, Money]]:
        """(description, amount, running balance) for each posting to ``account``."""
        rows = []
        running = 0
        for tx in self.transactions:
            for name, money in tx.postings:
                if name != account or money.currency != currency:
                    continue
                running += money.minor
                rows.append((tx.description, money, Money(running, currency)))
        return rows
'''

TASKS = [
    Bug(
        id="ledger-negate",
        repo=R,
        tier="easy",
        query="Money.__neg__ in ledger/money.py returns the amount unchanged. It must flip "
        "the sign: -Money(5, 'USD') is Money(-5, 'USD'). Fix it.",
        file="ledger/money.py",
        good="return Money(-self.minor, self.currency)",
        bad="return Money(self.minor, self.currency)",
    ),
    Bug(
        id="ledger-less-equal",
        repo=R,
        tier="easy",
        split="heldout",
        query="Money's <= operator in ledger/money.py returns False for equal amounts. Fix __le__.",
        file="ledger/money.py",
        good="return self.minor <= other.minor",
        bad="return self.minor < other.minor",
    ),
    Bug(
        id="ledger-subtract",
        repo=R,
        tier="easy",
        query="Money subtraction in ledger/money.py adds the amounts instead of subtracting "
        "them: 1.50 USD - 2.25 USD should be -0.75 USD. Fix __sub__.",
        file="ledger/money.py",
        good="return Money(self.minor - other.minor, self.currency)",
        bad="return Money(self.minor + other.minor, self.currency)",
    ),
    Bug(
        id="ledger-format-cents",
        repo=R,
        tier="easy",
        query="Money.format in ledger/money.py drops leading zeros of the cents: 0.07 USD "
        "prints as '0.7 USD' instead of '0.07 USD'. Fix it.",
        file="ledger/money.py",
        good='text += "." + str(frac).zfill(digits)',
        bad='text += "." + str(frac)',
    ),
    Bug(
        id="ledger-zero-transfer",
        repo=R,
        tier="easy",
        split="heldout",
        query="Ledger.transfer in ledger/book.py accepts a transfer of zero. The amount must "
        "be positive: zero must raise ValueError too. Fix the check.",
        file="ledger/book.py",
        good="if amount.minor <= 0:",
        bad="if amount.minor < 0:",
    ),
    Bug(
        id="ledger-allocate-loses-cent",
        repo=R,
        query="Splitting 100.00 USD three ways with Money.allocate([1, 1, 1]) loses a cent: "
        "the shares must always add up to the original amount.",
        file="ledger/money.py",
        good="remainder = self.minor - sum(shares)",
        bad="remainder = 0",
    ),
    Bug(
        id="ledger-inverse-rate",
        repo=R,
        split="heldout",
        query="With a RateTable that only knows EUR->USD = 1.10, converting 11.00 USD to EUR "
        "gives a wrong amount; it should be 10.00 EUR.",
        file="ledger/rates.py",
        good="return 1 / self._rates[(quote, base)]",
        bad="return self._rates[(quote, base)]",
    ),
    Change(
        id="ledger-statement",
        repo=R,
        kind="feature",
        query="Add Ledger.statement(account, currency) to ledger/book.py: a list of "
        "(description, amount, running_balance) tuples, one per posting to exactly that "
        "account in that currency, in posting order; amounts and balances are Money.",
        edits=[
            (
                "ledger/book.py",
                "    def accounts(self) -> list[str]:",
                STATEMENT.lstrip("\n") + "\n    def accounts(self) -> list[str]:",
            )
        ],
        hidden={
            "tests/test_statement.py": "from ledger.book import Ledger\n"
            "from ledger.money import Money\n\n\n"
            "def test_statement_running_balance():\n"
            "    book = Ledger()\n"
            '    book.transfer("equity", "bank", Money(1000, "USD"), "opening")\n'
            '    book.transfer("bank", "food", Money(250, "USD"), "lunch")\n'
            '    book.transfer("bank", "x", Money(5, "EUR"), "euro")\n'
            '    assert book.statement("bank", "USD") == [\n'
            '        ("opening", Money(1000, "USD"), Money(1000, "USD")),\n'
            '        ("lunch", Money(-250, "USD"), Money(750, "USD")),\n'
            "    ]\n"
            '    assert book.statement("nobody", "USD") == []\n'
        },
    ),
    Change(
        id="ledger-from-string",
        repo=R,
        kind="feature",
        query="Add Money.from_string(text) to ledger/money.py that reads '$12.50' (USD), "
        "'€3' (EUR), '£1.20' (GBP), '¥500' (JPY) and '12.50 USD' (a currency code after "
        "the number). Anything else raises ValueError.",
        edits=[
            (
                "ledger/money.py",
                'MINOR_UNITS = {"USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "KWD": 3}\n',
                'MINOR_UNITS = {"USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "KWD": 3}\n'
                'SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}\n',
            ),
            (
                "ledger/money.py",
                "    def _check(self, other: Money) -> None:",
                FROM_STRING.lstrip("\n") + "\n    def _check(self, other: Money) -> None:",
            ),
        ],
        hidden={
            "tests/test_from_string.py": "import pytest\n\nfrom ledger.money import Money\n\n\n"
            "@pytest.mark.parametrize(\n"
            '    ("text", "minor", "cur"),\n'
            '    [("$12.50", 1250, "USD"), ("€3", 300, "EUR"), ("£1.20", 120, "GBP"), '
            '("¥500", 500, "JPY"), ("12.50 USD", 1250, "USD")],\n'
            ")\n"
            "def test_from_string(text, minor, cur):\n"
            "    assert Money.from_string(text) == Money(minor, cur)\n\n\n"
            '@pytest.mark.parametrize("text", ["12.50", "12 XYZ", "#5"])\n'
            "def test_from_string_rejects(text):\n"
            "    with pytest.raises(ValueError):\n"
            "        Money.from_string(text)\n"
        },
    ),
    Change(
        id="ledger-transaction-module",
        repo=R,
        kind="refactor",
        query="Refactor: move Transaction and UnbalancedTransaction from ledger/book.py into "
        "a new module ledger/transaction.py. ledger.book must keep working as before, "
        "including `from ledger.book import UnbalancedTransaction`.",
        edits=[
            ("ledger/book.py", TRANSACTION_OLD, ""),
            (
                "ledger/book.py",
                "from dataclasses import dataclass, field\n\nfrom ledger.money import Money\n",
                "from ledger.money import Money\n"
                "from ledger.transaction import Transaction, UnbalancedTransaction\n\n"
                '__all__ = ["Ledger", "Transaction", "UnbalancedTransaction"]\n',
            ),
            ("ledger/transaction.py", None, TRANSACTION_MODULE),
        ],
        hidden={
            "tests/test_transaction_module.py": "import ledger.book\nimport ledger.transaction\n\n\n"
            "def test_transaction_has_its_own_module():\n"
            "    assert ledger.book.Transaction is ledger.transaction.Transaction\n"
            "    assert ledger.book.UnbalancedTransaction is ledger.transaction.UnbalancedTransaction\n"
            '    assert "class Transaction" not in open(ledger.book.__file__).read()\n'
        },
    ),
    WriteTests(
        id="ledger-tests-balance",
        repo=R,
        query="Ledger.balance in ledger/book.py needs tests of its own. Write them in a new "
        "file tests/test_balance.py: the account itself, its sub-accounts ('assets:bank' "
        "counts under 'assets'), accounts that merely share a prefix ('assetsx' does not), "
        "and postings in other currencies being ignored.",
        test_file="tests/test_balance.py",
        reference="from ledger.book import Ledger\nfrom ledger.money import Money\n\n\n"
        "def book():\n"
        "    b = Ledger()\n"
        '    b.post("a", [("assets", Money(1, "USD")), ("equity", Money(-1, "USD"))])\n'
        '    b.post("b", [("assets:bank", Money(10, "USD")), ("equity", Money(-10, "USD"))])\n'
        '    b.post("c", [("assetsx", Money(100, "USD")), ("equity", Money(-100, "USD"))])\n'
        '    b.post("d", [("assets", Money(7, "EUR")), ("equity", Money(-7, "EUR"))])\n'
        "    return b\n\n\n"
        "def test_balance_account_and_subaccounts():\n"
        '    assert book().balance("assets", "USD") == Money(11, "USD")\n\n\n'
        "def test_balance_leaf():\n"
        '    assert book().balance("assets:bank", "USD") == Money(10, "USD")\n\n\n'
        "def test_balance_other_currency():\n"
        '    assert book().balance("assets", "EUR") == Money(7, "EUR")\n',
        mutants=[
            (
                "ledger/book.py",
                "                if money.currency != currency:\n                    continue\n",
                "",
            ),
            ("ledger/book.py", 'name.startswith(account + ":")', "name.startswith(account)"),
            ("ledger/book.py", "if name == account or name.startswith", "if name.startswith"),
        ],
    ),
]
