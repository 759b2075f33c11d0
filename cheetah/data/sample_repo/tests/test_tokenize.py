from textkit.tokenize import words


def test_words_lowercases_and_splits():
    assert words("Hello, World! It's fine.") == ["hello", "world", "it's", "fine"]


def test_words_empty():
    assert words("  ...  ") == []
