from algos.sort import insertion_sort, is_sorted, merge, merge_sort


def test_merge_sort_sorts():
    assert merge_sort([5, 2, 9, 1, 5, 6]) == [1, 2, 5, 5, 6, 9]


def test_merge_sort_is_stable():
    pairs = [("b", 1), ("a", 2), ("c", 1), ("d", 2)]
    assert merge_sort(pairs, key=lambda p: p[1]) == [("b", 1), ("c", 1), ("a", 2), ("d", 2)]


def test_insertion_sort_matches_sorted():
    data = [4, -1, 7, 0, 3, 3]
    assert insertion_sort(data) == sorted(data)
    assert data == [4, -1, 7, 0, 3, 3]


def test_merge_keeps_left_first_on_ties():
    assert merge([(1, "l")], [(1, "r")], key=lambda p: p[0]) == [(1, "l"), (1, "r")]


def test_is_sorted():
    assert is_sorted([1, 1, 2])
    assert not is_sorted([2, 1])
    assert is_sorted([])
