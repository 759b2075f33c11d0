"""Word statistics over a text."""

from collections import Counter

from textkit.tokenize import words

WORDS_PER_MINUTE = 200


def word_frequencies(text: str) -> dict[str, int]:
    """How often each word occurs."""
    return dict(Counter(words(text)))


def top_words(text: str, n: int = 10) -> list[tuple[str, int]]:
    """The ``n`` most frequent words, most frequent first; ties in alphabetical order."""
    if n <= 0:
        return []
    counts = word_frequencies(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[: n - 1]


def mean_word_length(text: str) -> float:
    """Average number of characters per word (0.0 for a text without words)."""
    ws = words(text)
    if not ws:
        return 0.0
    return sum(len(w) for w in ws) / len(ws)


def reading_time_minutes(text: str, wpm: int = WORDS_PER_MINUTE) -> float:
    """Minutes to read ``text`` at ``wpm`` words per minute, rounded to one decimal."""
    if wpm <= 0:
        raise ValueError("wpm must be positive")
    return round(len(words(text)) / wpm, 1)
