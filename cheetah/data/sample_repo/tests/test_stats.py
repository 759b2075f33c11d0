import pytest

from textkit.stats import mean_word_length, reading_time_minutes, top_words, word_frequencies

TEXT = "the cat and the dog and the bird"


def test_word_frequencies():
    assert word_frequencies(TEXT) == {"the": 3, "cat": 1, "and": 2, "dog": 1, "bird": 1}


def test_top_words_returns_n_words():
    assert top_words(TEXT, 2) == [("the", 3), ("and", 2)]


def test_top_words_ties_are_alphabetical():
    assert top_words(TEXT, 4) == [("the", 3), ("and", 2), ("bird", 1), ("cat", 1)]


def test_top_words_zero():
    assert top_words(TEXT, 0) == []


def test_mean_word_length():
    assert mean_word_length("ab abcd") == 3.0
    assert mean_word_length("") == 0.0


def test_reading_time():
    assert reading_time_minutes("word " * 300) == 1.5
    with pytest.raises(ValueError):
        reading_time_minutes("x", wpm=0)
