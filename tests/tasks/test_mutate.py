from collections import Counter

from cheetah.tasks.mutate import mutants_of

SRC = '''\
"""Docstring with 1 < 2 in it."""

__all__ = ["f"]


def f(items, n, flag=True):
    """Return 5 things."""
    if n > 10:
        return []
    total = 0
    for x in items[:n]:
        total += x * 2
    return max(total, n) if flag else total == 0


def g(a, b):
    return a and b
'''


def changed_lines(m):
    a, b = m.original.splitlines(), m.mutated.splitlines()
    return [(x.strip(), y.strip()) for x, y in zip(a, b, strict=False) if x != y]


def test_each_operator_produces_small_parseable_mutants():
    ms = mutants_of("pkg/f.py", SRC)
    ops = Counter(m.operator for m in ms)
    assert set(ops) == {
        "compare",
        "arith",
        "boolop",
        "off_by_one",
        "drop_if",
        "swap_args",
        "constant",
    }
    pairs = {p for m in ms for p in changed_lines(m)}
    assert ("if n > 10:", "if n >= 10:") in pairs
    assert ("total += x * 2", "total -= x * 2") in pairs
    assert ("total += x * 2", "total += x / 2") in pairs
    assert ("for x in items[:n]:", "for x in items[:n + 1]:") in pairs
    assert (
        "return max(total, n) if flag else total == 0",
        "return max(n, total) if flag else total == 0",
    ) in pairs
    assert ("def f(items, n, flag=True):", "def f(items, n, flag=False):") in pairs
    assert ("if n > 10:", "pass") in pairs
    assert ("return a and b", "return a or b") in pairs


def test_docstrings_and_dunder_all_are_never_mutated():
    for m in mutants_of("pkg/f.py", SRC):
        assert m.mutated.startswith('"""Docstring with 1 < 2 in it."""\n\n__all__ = ["f"]')
        assert '"""Return 5 things."""' in m.mutated


def test_mutants_are_unique_and_differ_from_the_source():
    ms = mutants_of("pkg/f.py", SRC)
    assert len({m.mutated for m in ms}) == len(ms)
    assert all(m.mutated != SRC for m in ms)
    assert mutants_of("bad.py", "def (:\n") == []
