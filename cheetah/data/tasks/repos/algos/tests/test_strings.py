from algos.strings import is_palindrome, levenshtein, longest_common_prefix, rle_decode, rle_encode


def test_levenshtein():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("same", "same") == 0


def test_is_palindrome_ignores_case_and_punctuation():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert not is_palindrome("cheetah")


def test_rle_roundtrip():
    runs = rle_encode("aaabccdddd")
    assert runs == [("a", 3), ("b", 1), ("c", 2), ("d", 4)]
    assert rle_decode(runs) == "aaabccdddd"


def test_longest_common_prefix():
    assert longest_common_prefix(["flower", "flow", "flight"]) == "fl"
    assert longest_common_prefix(["dog", "racecar"]) == ""
    assert longest_common_prefix([]) == ""
