from algos.search import binary_search, bisect_left, bisect_right, count_in_range, first_true


def test_bisect_left_finds_first_of_equal_run():
    assert bisect_left([1, 2, 2, 2, 5], 2) == 1


def test_bisect_left_past_the_end():
    assert bisect_left([1, 2, 3], 9) == 3


def test_bisect_right_after_equal_run():
    assert bisect_right([1, 2, 2, 2, 5], 2) == 4


def test_binary_search_present_and_absent():
    items = [3, 8, 13, 21, 34]
    assert binary_search(items, 21) == 3
    assert binary_search(items, 4) == -1
    assert binary_search([], 4) == -1


def test_count_in_range_inclusive():
    assert count_in_range([1, 3, 3, 5, 7, 9], 3, 7) == 4
    assert count_in_range([1, 3, 5], 6, 2) == 0


def test_first_true_monotone_predicate():
    assert first_true(0, 100, lambda i: i * i >= 50) == 8
    assert first_true(0, 10, lambda i: False) == 10
