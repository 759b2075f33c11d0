"""``Money``: an integer number of minor units (cents) in one currency."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

MINOR_UNITS = {"USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "KWD": 3}


class CurrencyMismatch(ValueError):
    """Arithmetic between amounts in different currencies."""


def minor_digits(currency: str) -> int:
    try:
        return MINOR_UNITS[currency]
    except KeyError:
        raise ValueError(f"unknown currency {currency!r}") from None


@dataclass(frozen=True, order=False)
class Money:
    minor: int
    currency: str

    @classmethod
    def parse(cls, text: str, currency: str) -> Money:
        """ "12.34" in USD -> Money(1234, "USD"); rounds half to even past the minor unit."""
        digits = minor_digits(currency)
        value = Decimal(text.strip().replace(",", ""))
        minor = (value * (10**digits)).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
        return cls(int(minor), currency)

    def _check(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency} vs {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor + other.minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor - other.minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.minor, self.currency)

    def __lt__(self, other: Money) -> bool:
        self._check(other)
        return self.minor < other.minor

    def __le__(self, other: Money) -> bool:
        self._check(other)
        return self.minor <= other.minor

    def times(self, factor: int | str | Decimal) -> Money:
        """Multiply by an exact factor, rounding half to even to the minor unit."""
        product = Decimal(self.minor) * Decimal(str(factor))
        return Money(int(product.quantize(Decimal(1), rounding=ROUND_HALF_EVEN)), self.currency)

    def allocate(self, ratios: list[int]) -> list[Money]:
        """Split by integer ratios without losing a cent; leftovers go to the first shares."""
        if not ratios or any(r < 0 for r in ratios) or sum(ratios) == 0:
            raise ValueError("ratios must be non-negative and not all zero")
        total = sum(ratios)
        shares = [self.minor * r // total for r in ratios]
        remainder = self.minor - sum(shares)
        for i in range(remainder):
            shares[i % len(shares)] += 1
        return [Money(s, self.currency) for s in shares]

    def format(self, thousands: str = ",") -> str:
        """ "1,234.56 USD"; negative amounts get a leading minus."""
        digits = minor_digits(self.currency)
        sign = "-" if self.minor < 0 else ""
        whole, frac = divmod(abs(self.minor), 10**digits)
        text = f"{whole:,}".replace(",", thousands)
        if digits:
            text += "." + str(frac).zfill(digits)
        return f"{sign}{text} {self.currency}"

    def __str__(self) -> str:
        return self.format()
