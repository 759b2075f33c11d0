import pytest

from cheetah.tasks.generate import GenerateConfig, GenerateError, generate_tasks, source_files
from cheetah.tasks.session import local_sessions
from cheetah.tasks.validate import validate_tasks
from tests.sandbox.conftest import needs_isolation

LIB = """\
def mean(xs):
    if not xs:
        raise ValueError("empty")
    return sum(xs) / len(xs)


def window(xs, n):
    return [xs[i : i + n] for i in range(len(xs) - n + 1)]
"""

TESTS = """\
import pytest

from stats.core import mean, window


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_window():
    assert window([1, 2, 3], 2) == [[1, 2], [2, 3]]


def test_unrelated():
    assert True
"""


@pytest.fixture
def stats_repo(tmp_path):
    root = tmp_path / "stats"
    (root / "stats").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "stats" / "__init__.py").write_text("")
    (root / "stats" / "core.py").write_text(LIB)
    (root / "tests" / "test_core.py").write_text(TESTS)
    (root / "setup.py").write_text("x = 1 + 1\n")
    return root


def test_source_files_skip_tests_and_setup(stats_repo):
    assert source_files(stats_repo, []) == ["stats/__init__.py", "stats/core.py"]


async def test_generate_keeps_caught_mutants_with_queries_that_hide_them(stats_repo):
    config = GenerateConfig(max_mutants=12, max_tasks=6, seed=1, concurrency=2)
    result = await generate_tasks(stats_repo, config)
    assert result.tasks, result.stats
    s = result.stats
    assert s["tried"] == min(12, s["candidates"]) and s["candidates"] >= 8
    assert s["killed"] + s["survived"] + s["broken"] + s["timeouts"] == s["tried"]
    assert len(result.tasks) == s["killed"] - s["duplicates"]
    for t in result.tasks:
        assert t.fail_to_pass and "tests/test_core.py::test_unrelated" not in [
            c.test for c in t.fail_to_pass
        ]
        removed = [
            ln[1:].strip()
            for ln in t.snapshot.patch.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ]
        original = [
            ln[1:].strip()
            for ln in t.snapshot.patch.splitlines()
            if ln.startswith("-") and not ln.startswith("---")
        ]
        for line in removed + original:
            assert line not in t.query
        assert "stats/core.py" not in t.query
        assert t.kind == "generated" and t.tags[0] == "generated"
    assert len({t.id for t in result.tasks}) == len(result.tasks)
    valid = await validate_tasks(result.tasks[:2], local_sessions("local"))
    assert all(v.ok for v in valid), [v.problems for v in valid]


async def test_generate_errors_clearly(tmp_path, stats_repo):
    with pytest.raises(GenerateError, match="no repository"):
        await generate_tasks(tmp_path / "nope")
    (stats_repo / "tests" / "test_core.py").write_text("def test_x():\n    assert False\n")
    with pytest.raises(GenerateError, match="no test passed"):
        await generate_tasks(stats_repo, GenerateConfig(max_mutants=2))


@needs_isolation
async def test_sandboxed_generation_keeps_what_the_trusted_path_keeps(stats_repo):
    config = GenerateConfig(max_mutants=8, max_tasks=8, seed=2, concurrency=2)
    trusted = await generate_tasks(stats_repo, config)
    opener = local_sessions("isolated")
    sandboxed = await generate_tasks(stats_repo, config, sessions=opener)
    assert sandboxed.stats["tried"] == trusted.stats["tried"] and sandboxed.tasks
    if not trusted.stats["timeouts"] and not sandboxed.stats["timeouts"]:  # a busy machine's
        assert sandboxed.stats == trusted.stats  # timeouts aside, the same mutants are kept
        assert [t.id for t in sandboxed.tasks] == [t.id for t in trusted.tasks]
    assert not opener.env.sessions  # every worker session is closed
    valid = await validate_tasks(sandboxed.tasks[:2], opener)
    assert all(v.ok for v in valid), [v.problems for v in valid]
