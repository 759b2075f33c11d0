"""textkit: small text statistics."""

from textkit.stats import mean_word_length, reading_time_minutes, top_words, word_frequencies
from textkit.tokenize import words

__all__ = ["mean_word_length", "reading_time_minutes", "top_words", "word_frequencies", "words"]
