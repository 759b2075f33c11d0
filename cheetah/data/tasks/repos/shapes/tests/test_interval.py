import pytest

from shapes.interval import Interval, count_containing, merge, total_length, uncovered


def test_construction_rejects_inverted_bounds():
    with pytest.raises(ValueError):
        Interval(3, 2)
    assert Interval(2, 2).lo == 2


def test_length_and_midpoint():
    iv = Interval(2, 8)
    assert iv.length == 6
    assert iv.midpoint == 5
    assert Interval(-4, -1).midpoint == -2.5


def test_is_degenerate():
    assert Interval(3, 3).is_degenerate()
    assert not Interval(3, 4).is_degenerate()


def test_contains_includes_both_ends():
    iv = Interval(1, 5)
    assert iv.contains(1)
    assert iv.contains(5)
    assert iv.contains(3)
    assert not iv.contains(0.5)
    assert not iv.contains(5.5)


def test_contains_interval():
    outer = Interval(0, 10)
    assert outer.contains_interval(Interval(0, 10))
    assert outer.contains_interval(Interval(2, 3))
    assert not outer.contains_interval(Interval(-1, 3))
    assert not outer.contains_interval(Interval(8, 11))


def test_overlaps_counts_touching():
    a = Interval(0, 5)
    assert a.overlaps(Interval(5, 9))
    assert Interval(5, 9).overlaps(a)
    assert a.overlaps(Interval(2, 3))
    assert not a.overlaps(Interval(6, 9))
    assert not Interval(6, 9).overlaps(a)


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)
    assert Interval(3, 9).intersection(Interval(0, 5)) == Interval(3, 5)
    assert Interval(0, 5).intersection(Interval(5, 9)) == Interval(5, 5)
    assert Interval(0, 5).intersection(Interval(6, 9)) is None


def test_gap_between_disjoint_intervals():
    assert Interval(0, 2).gap(Interval(5, 6)) == 3
    assert Interval(5, 6).gap(Interval(0, 2)) == 3
    assert Interval(0, 2).gap(Interval(2, 6)) is None
    assert Interval(2, 6).gap(Interval(0, 2)) is None
    assert Interval(0, 4).gap(Interval(1, 2)) is None


def test_scale_about_midpoint():
    assert Interval(2, 6).scale(3) == Interval(-2, 10)
    assert Interval(2, 6).scale(0.5) == Interval(3, 5)
    assert Interval(2, 6).scale(0) == Interval(4, 4)
    with pytest.raises(ValueError):
        Interval(2, 6).scale(-1)


def test_split_strictly_inside():
    assert Interval(0, 10).split(4) == (Interval(0, 4), Interval(4, 10))
    with pytest.raises(ValueError):
        Interval(0, 10).split(0)
    with pytest.raises(ValueError):
        Interval(0, 10).split(10)
    with pytest.raises(ValueError):
        Interval(0, 10).split(11)


def test_position():
    iv = Interval(2, 6)
    assert iv.position(2) == 0
    assert iv.position(6) == 1
    assert iv.position(3) == 0.25
    assert iv.position(10) == 2
    with pytest.raises(ValueError):
        Interval(1, 1).position(1)


def test_merge_joins_overlapping_and_touching():
    got = merge([Interval(8, 9), Interval(0, 2), Interval(2, 4), Interval(3, 5)])
    assert got == [Interval(0, 5), Interval(8, 9)]


def test_merge_keeps_disjoint_and_contained():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]
    assert merge([Interval(4, 5), Interval(0, 1)]) == [Interval(0, 1), Interval(4, 5)]
    assert merge([]) == []


def test_total_length():
    assert total_length([Interval(0, 4), Interval(2, 6), Interval(10, 11)]) == 7
    assert total_length([]) == 0


def test_uncovered():
    within = Interval(0, 10)
    got = uncovered([Interval(2, 3), Interval(5, 7)], within)
    assert got == [Interval(0, 2), Interval(3, 5), Interval(7, 10)]


def test_uncovered_with_covers_flush_to_edges():
    within = Interval(0, 10)
    assert uncovered([Interval(0, 4), Interval(6, 10)], within) == [Interval(4, 6)]
    assert uncovered([Interval(-5, 15)], within) == []
    assert uncovered([], within) == [within]


def test_uncovered_ignores_outside_parts():
    within = Interval(0, 10)
    got = uncovered([Interval(-3, 2), Interval(10, 12), Interval(20, 30)], within)
    assert got == [Interval(2, 10)]
    assert uncovered([Interval(-3, -1)], within) == [within]


def test_count_containing():
    ivs = [Interval(0, 5), Interval(5, 8), Interval(6, 9)]
    assert count_containing(ivs, 5) == 2
    assert count_containing(ivs, 0) == 1
    assert count_containing(ivs, 8) == 2
    assert count_containing(ivs, 9) == 1
    assert count_containing(ivs, 9.5) == 0
    assert count_containing(ivs, -1) == 0
