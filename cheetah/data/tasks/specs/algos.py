"""Tasks on benchmarks/repos/algos (searching, sorting, graphs, strings)."""

from build import Bug, Change, WriteTests

R = "algos"

TASKS = [
    Bug(
        id="algos-rle-decode-count",
        repo=R,
        tier="easy",
        query="rle_decode in algos/strings.py writes each character one time too few: "
        "[('a', 3)] should decode to 'aaa'. Fix it.",
        file="algos/strings.py",
        good='return "".join(ch * n for ch, n in runs)',
        bad='return "".join(ch * (n - 1) for ch, n in runs)',
    ),
    Bug(
        id="algos-binary-search-absent",
        repo=R,
        tier="easy",
        split="heldout",
        query="binary_search in algos/search.py must return -1 when the target is not in "
        "the list, but it returns 0. Fix it.",
        file="algos/search.py",
        good="        return i\n    return -1",
        bad="        return i\n    return 0",
    ),
    Bug(
        id="algos-bisect-left-equal-run",
        repo=R,
        tier="easy",
        query="bisect_left in algos/search.py returns the index after a run of equal "
        "elements instead of the index of the first one. Fix it.",
        file="algos/search.py",
        good="        if items[mid] < target:\n            lo = mid + 1",
        bad="        if items[mid] <= target:\n            lo = mid + 1",
    ),
    Bug(
        id="algos-palindrome-case",
        repo=R,
        tier="easy",
        split="heldout",
        query="is_palindrome in algos/strings.py should ignore upper/lower case, but "
        "'A man, a plan, a canal: Panama' is reported as not a palindrome. Fix it.",
        file="algos/strings.py",
        good="chars = [c.lower() for c in text if c.isalnum()]",
        bad="chars = [c for c in text if c.isalnum()]",
    ),
    Bug(
        id="algos-is-sorted-equal-neighbours",
        repo=R,
        tier="easy",
        query="is_sorted in algos/sort.py returns False for [1, 1, 2]. Equal neighbours "
        "are allowed in a sorted list. Fix it.",
        file="algos/sort.py",
        good="return all(a <= b for a, b in zip(data, data[1:]))",
        bad="return all(a < b for a, b in zip(data, data[1:]))",
    ),
    Bug(
        id="algos-merge-sort-stability",
        repo=R,
        query="merge_sort is documented as stable, but records with equal keys do not "
        "keep their input order. Find the cause and fix it.",
        file="algos/sort.py",
        good="if key(left[i]) <= key(right[j]):",
        bad="if key(left[i]) < key(right[j]):",
    ),
    Bug(
        id="algos-levenshtein-substitution",
        repo=R,
        split="heldout",
        query="levenshtein('kitten', 'sitting') should be 3 but the function returns "
        "something else. Fix the edit distance.",
        file="algos/strings.py",
        good="previous[j - 1] + cost",
        bad="previous[j] + cost",
    ),
    Change(
        id="algos-hamming",
        repo=R,
        kind="feature",
        query="Add hamming(a, b) to algos/strings.py: the number of positions at which "
        "two equal-length strings differ. Raise ValueError when the lengths differ.",
        edits=[
            (
                "algos/strings.py",
                "def rle_encode(",
                "def hamming(a: str, b: str) -> int:\n"
                '    """Positions at which two equal-length strings differ."""\n'
                "    if len(a) != len(b):\n"
                '        raise ValueError("strings must have equal length")\n'
                "    return sum(x != y for x, y in zip(a, b))\n\n\n"
                "def rle_encode(",
            )
        ],
        hidden={
            "tests/test_hamming.py": "import pytest\n\nfrom algos.strings import hamming\n\n\n"
            "def test_hamming_counts_differences():\n"
            '    assert hamming("karolin", "kathrin") == 3\n'
            '    assert hamming("", "") == 0\n'
            '    assert hamming("abc", "abc") == 0\n\n\n'
            "def test_hamming_unequal_lengths():\n"
            "    with pytest.raises(ValueError):\n"
            '        hamming("ab", "abc")\n'
        },
    ),
    Change(
        id="algos-has-cycle",
        repo=R,
        kind="feature",
        query="Add has_cycle(graph) to algos/graph.py: True when the directed graph "
        "(adjacency dict) has a cycle, False otherwise. A self-loop counts as a cycle.",
        edits=[
            (
                "algos/graph.py",
                "def dijkstra(",
                "def has_cycle(graph: Mapping[Node, Sequence[Node]]) -> bool:\n"
                '    """Whether the directed graph has a cycle (a self-loop counts)."""\n'
                "    try:\n"
                "        topological_sort(graph)\n"
                "    except CycleError:\n"
                "        return True\n"
                "    return False\n\n\n"
                "def dijkstra(",
            )
        ],
        hidden={
            "tests/test_has_cycle.py": "from algos.graph import has_cycle\n\n\n"
            "def test_has_cycle():\n"
            '    assert has_cycle({"a": ["b"], "b": ["c"], "c": ["a"]})\n'
            '    assert has_cycle({"a": ["a"]})\n'
            '    assert not has_cycle({"a": ["b", "c"], "b": ["c"]})\n'
            "    assert not has_cycle({})\n"
        },
    ),
    Change(
        id="algos-move-rle-module",
        repo=R,
        kind="refactor",
        query="Refactor: move rle_encode and rle_decode out of algos/strings.py into a new "
        "module algos/rle.py. Existing imports from algos.strings must keep working, and "
        "all tests must stay green.",
        edits=[
            (
                "algos/strings.py",
                "def rle_encode(text: str) -> list[tuple[str, int]]:\n"
                '    """Run-length encoding: "aaab" -> [("a", 3), ("b", 1)]."""\n'
                "    runs: list[tuple[str, int]] = []\n"
                "    for ch in text:\n"
                "        if runs and runs[-1][0] == ch:\n"
                "            runs[-1] = (ch, runs[-1][1] + 1)\n"
                "        else:\n"
                "            runs.append((ch, 1))\n"
                "    return runs\n\n\n"
                "def rle_decode(runs: list[tuple[str, int]]) -> str:\n"
                '    """Inverse of ``rle_encode``."""\n'
                '    return "".join(ch * n for ch, n in runs)\n\n\n',
                "",
            ),
            (
                "algos/strings.py",
                "from __future__ import annotations\n",
                "from __future__ import annotations\n\n"
                "from algos.rle import rle_decode, rle_encode\n\n"
                '__all__ = ["is_palindrome", "levenshtein", "longest_common_prefix", '
                '"rle_decode", "rle_encode"]\n',
            ),
            (
                "algos/rle.py",
                None,
                '"""Run-length encoding."""\n\n'
                "from __future__ import annotations\n\n\n"
                "def rle_encode(text: str) -> list[tuple[str, int]]:\n"
                '    """Run-length encoding: "aaab" -> [("a", 3), ("b", 1)]."""\n'
                "    runs: list[tuple[str, int]] = []\n"
                "    for ch in text:\n"
                "        if runs and runs[-1][0] == ch:\n"
                "            runs[-1] = (ch, runs[-1][1] + 1)\n"
                "        else:\n"
                "            runs.append((ch, 1))\n"
                "    return runs\n\n\n"
                "def rle_decode(runs: list[tuple[str, int]]) -> str:\n"
                '    """Inverse of ``rle_encode``."""\n'
                '    return "".join(ch * n for ch, n in runs)\n',
            ),
        ],
        hidden={
            "tests/test_rle_module.py": "import algos.rle\nimport algos.strings\n\n\n"
            "def test_rle_lives_in_its_own_module():\n"
            '    assert algos.rle.rle_encode("aab") == [("a", 2), ("b", 1)]\n'
            '    assert algos.rle.rle_decode([("x", 3)]) == "xxx"\n'
            '    assert algos.strings.rle_encode("q") == [("q", 1)]\n'
            '    assert "def rle_encode" not in open(algos.strings.__file__).read()\n'
        },
    ),
    WriteTests(
        id="algos-tests-first-true",
        repo=R,
        query="first_true in algos/search.py has no tests of its own. Write tests for it in "
        "a new file tests/test_first_true.py: cover an ordinary case, a predicate that is "
        "never true, one that is true from the start, and an empty range.",
        test_file="tests/test_first_true.py",
        reference="from algos.search import first_true\n\n\n"
        "def test_first_true_finds_boundary():\n"
        "    assert first_true(0, 100, lambda i: i * i >= 50) == 8\n\n\n"
        "def test_first_true_none_true_returns_hi():\n"
        "    assert first_true(0, 10, lambda i: False) == 10\n\n\n"
        "def test_first_true_all_true_returns_lo():\n"
        "    assert first_true(3, 10, lambda i: True) == 3\n\n\n"
        "def test_first_true_empty_range():\n"
        "    assert first_true(5, 5, lambda i: True) == 5\n",
        mutants=[
            ("algos/search.py", "        if predicate(mid):", "        if not predicate(mid):"),
            (
                "algos/search.py",
                "    while lo < hi:\n        mid = (lo + hi) // 2\n        if predicate",
                "    while lo < hi - 1:\n        mid = (lo + hi) // 2\n        if predicate",
            ),
            (
                "algos/search.py",
                'hi if none."""\n',
                'hi if none."""\n    if lo < hi and predicate(lo):\n        return lo + 1\n',
            ),
        ],
    ),
]
