"""Currency conversion with explicit rates."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

from ledger.money import Money, minor_digits


class RateTable:
    """Rates as "1 unit of BASE = rate units of QUOTE"; inverse rates are derived."""

    def __init__(self) -> None:
        self._rates: dict[tuple[str, str], Decimal] = {}

    def set(self, base: str, quote: str, rate: str | Decimal) -> None:
        value = Decimal(str(rate))
        if value <= 0:
            raise ValueError("rate must be positive")
        self._rates[(base, quote)] = value

    def rate(self, base: str, quote: str) -> Decimal:
        if base == quote:
            return Decimal(1)
        if (base, quote) in self._rates:
            return self._rates[(base, quote)]
        if (quote, base) in self._rates:
            return 1 / self._rates[(quote, base)]
        raise KeyError(f"no rate for {base}->{quote}")

    def convert(self, amount: Money, to: str) -> Money:
        """``amount`` in currency ``to``, rounded half to even to its minor unit."""
        rate = self.rate(amount.currency, to)
        major = Decimal(amount.minor) / (10 ** minor_digits(amount.currency))
        minor = (major * rate * (10 ** minor_digits(to))).quantize(
            Decimal(1), rounding=ROUND_HALF_EVEN
        )
        return Money(int(minor), to)
