"""Splitting text into words."""

import re

_WORD = re.compile(r"[A-Za-z0-9']+")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``; punctuation and whitespace separate words."""
    return [w.lower().strip("'") for w in _WORD.findall(text) if w.strip("'")]
