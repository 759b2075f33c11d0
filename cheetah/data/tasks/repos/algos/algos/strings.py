"""String algorithms."""

from __future__ import annotations


def levenshtein(a: str, b: str) -> int:
    """Edit distance: insertions, deletions and substitutions each cost 1."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost))
        previous = current
    return previous[-1]


def is_palindrome(text: str) -> bool:
    """Whether ``text`` reads the same both ways, ignoring case and non-alphanumerics."""
    chars = [c.lower() for c in text if c.isalnum()]
    return chars == chars[::-1]


def rle_encode(text: str) -> list[tuple[str, int]]:
    """Run-length encoding: "aaab" -> [("a", 3), ("b", 1)]."""
    runs: list[tuple[str, int]] = []
    for ch in text:
        if runs and runs[-1][0] == ch:
            runs[-1] = (ch, runs[-1][1] + 1)
        else:
            runs.append((ch, 1))
    return runs


def rle_decode(runs: list[tuple[str, int]]) -> str:
    """Inverse of ``rle_encode``."""
    return "".join(ch * n for ch, n in runs)


def longest_common_prefix(words: list[str]) -> str:
    """The longest string that starts every word ("" for no words)."""
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        n = 0
        while n < min(len(prefix), len(word)) and prefix[n] == word[n]:
            n += 1
        prefix = prefix[:n]
    return prefix
