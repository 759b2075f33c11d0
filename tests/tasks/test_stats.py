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
