"""Statistics for comparing a model before and after training on the same held-out tasks.

- ``wilson_interval``: the Wilson score interval of a pass rate (good at 0 and small n,
  where the normal interval collapses to a point).
- ``mcnemar_exact``: the paired test for two stages graded on the same tasks. Only the
  discordant tasks count (``b``: solved before, not after; ``c``: solved after, not
  before); under "no change" each is a fair coin, so the two-sided p-value is
  ``min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)])``, computed exactly.
- ``compare``: both, for two stages given as task id -> solved.
- ``wilcoxon_signed_rank``: the paired test for a per-task number (turns per task, calls
  per turn) in two stages: zero differences dropped (Wilcoxon's convention), tied
  magnitudes given their mean rank, and the two-sided p-value computed exactly from the
  distribution of the positive rank sum over all sign patterns (a dynamic program over
  doubled ranks, so ties stay exact; no scipy needed for one test, and exact at the
  sample sizes of a held-out set, where the normal approximation is poor).

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


def wilcoxon_signed_rank(before: list[float], after: list[float]) -> float:
    """Two-sided exact p-value of the Wilcoxon signed-rank test on paired values (1.0 when
    every pair is equal)."""
    if len(before) != len(after):
        raise ValueError(f"paired values: {len(before)} before, {len(after)} after")
    diffs = [b - a for a, b in zip(before, after, strict=True) if b != a]
    if not diffs:
        return 1.0
    order = sorted(range(len(diffs)), key=lambda i: abs(diffs[i]))
    doubled = [0] * len(diffs)  # twice the rank: mean ranks of ties stay integers
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and abs(diffs[order[j + 1]]) == abs(diffs[order[i]]):
            j += 1
        for k in range(i, j + 1):
            doubled[order[k]] = i + j + 2  # ranks i+1 .. j+1, mean (i+j+2)/2, doubled
        i = j + 1
    total = sum(doubled)
    counts = [0] * (total + 1)  # sign patterns by their doubled positive rank sum
    counts[0] = 1
    for r in doubled:
        for w in range(total, r - 1, -1):
            counts[w] += counts[w - r]
    observed = sum(r for r, d in zip(doubled, diffs, strict=True) if d > 0)
    patterns = 2 ** len(diffs)
    low = sum(counts[: observed + 1]) / patterns
    high = sum(counts[observed:]) / patterns
    return min(1.0, 2 * min(low, high))
