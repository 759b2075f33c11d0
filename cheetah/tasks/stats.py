"""Statistics for comparing a model before and after training on the same held-out tasks.

- ``wilson_interval``: the Wilson score interval of a pass rate (good at 0 and small n,
  where the normal interval collapses to a point).
- ``mcnemar_exact``: the paired test for two stages graded on the same tasks. Only the
  discordant tasks count (``b``: solved before, not after; ``c``: solved after, not
  before); under "no change" each is a fair coin, so the two-sided p-value is
  ``min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)])``, computed exactly.
- ``compare``: both, for two stages given as task id -> solved.

Pure functions over counts; deliberately left out: corrections for multiple comparisons
(the driver reports three stages and says which pair each p-value is for).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb, sqrt


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of ``successes`` out of ``n``."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts cannot be negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Comparison:
    """Stage ``after`` against stage ``before`` on the tasks both graded."""

    tasks: int
    only_before: int  # b: solved before, not after
    only_after: int  # c: solved after, not before
    p_value: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tasks": self.tasks,
            "only_before": self.only_before,
            "only_after": self.only_after,
            "mcnemar_p": self.p_value,
        }


def compare(before: dict[str, bool], after: dict[str, bool]) -> Comparison:
    """McNemar on the tasks present in both stages."""
    shared = sorted(set(before) & set(after))
    b = sum(before[t] and not after[t] for t in shared)
    c = sum(after[t] and not before[t] for t in shared)
    return Comparison(len(shared), b, c, mcnemar_exact(b, c))
