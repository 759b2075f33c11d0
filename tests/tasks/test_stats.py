"""Wilson intervals and the exact McNemar test against values computed by hand and by scipy."""

import pytest

from cheetah.tasks.stats import compare, mcnemar_exact, wilson_interval


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(0, 4)
    assert lo == 0.0 and hi == pytest.approx(0.4899, abs=1e-4)  # "0-60%" is the Wald-ish range
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = wilson_interval(64, 64)
    assert hi == 1.0 and lo == pytest.approx(0.9434, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_mcnemar_exact_known_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)  # 0.03125: six wins, no loss
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 0.0625: five are not enough
    assert mcnemar_exact(3, 3) == 1.0
    # 2 * (C(12,0) + C(12,1) + C(12,2)) / 2**12 = 2 * 79 / 4096
    assert mcnemar_exact(2, 10) == pytest.approx(0.03857421875)
    assert mcnemar_exact(10, 2) == mcnemar_exact(2, 10)


def test_compare_pairs_tasks_by_id():
    before = {"a": False, "b": True, "c": False, "d": False}
    after = {"a": True, "b": True, "c": True, "e": True}
    cmp = compare(before, after)
    assert (cmp.tasks, cmp.only_before, cmp.only_after) == (3, 0, 2)
    assert cmp.p_value == pytest.approx(0.5)


def test_wilcoxon_signed_rank_known_values():
    from cheetah.tasks.stats import wilcoxon_signed_rank

    assert wilcoxon_signed_rank([1, 2, 3], [1, 2, 3]) == 1.0  # no difference at all
    assert wilcoxon_signed_rank([0] * 5, [1, 2, 3, 4, 5]) == pytest.approx(2 / 32)
    assert wilcoxon_signed_rank([0] * 6, [1, 2, 3, 4, 5, 6]) == pytest.approx(2 / 64)
    # Hollander & Wolfe's depression scores (R's wilcox.test example): V = 40, p = 0.0390625
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    assert wilcoxon_signed_rank(y, x) == pytest.approx(0.0390625)
    assert wilcoxon_signed_rank(x, y) == pytest.approx(0.0390625)
    # Ties: |1|, |1| share rank 1.5; all three up: 1 of 8 sign patterns is as extreme
    assert wilcoxon_signed_rank([0, 0, 0], [1, 1, 2]) == pytest.approx(2 / 8)
    with pytest.raises(ValueError):
        wilcoxon_signed_rank([1], [1, 2])


def test_wilcoxon_signed_rank_matches_enumerating_every_sign_pattern():
    import itertools
    import random

    from cheetah.tasks.stats import wilcoxon_signed_rank

    rng = random.Random(0)
    for _ in range(40):
        n = rng.randint(1, 9)
        before = [rng.randint(0, 4) for _ in range(n)]
        after = [rng.randint(0, 4) for _ in range(n)]
        d = [b - a for a, b in zip(before, after, strict=True) if b != a]
        if not d:
            continue
        mags = sorted(abs(v) for v in d)
        rank = {m: (mags.index(m) + 1 + len(mags) - mags[::-1].index(m)) / 2 for m in mags}
        w = sum(rank[abs(v)] for v in d if v > 0)
        sums = [
            sum(rank[abs(v)] for v, s in zip(d, signs, strict=True) if s)
            for signs in itertools.product([0, 1], repeat=len(d))
        ]
        lo = sum(s <= w for s in sums) / len(sums)
        hi = sum(s >= w for s in sums) / len(sums)
        assert wilcoxon_signed_rank(before, after) == pytest.approx(min(1.0, 2 * min(lo, hi)))
