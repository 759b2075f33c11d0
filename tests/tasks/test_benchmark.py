"""The bundled benchmark: its shape, and that its tasks validate."""

from collections import Counter
from pathlib import Path

import pytest

from cheetah.bundled import TASK_SETS
from cheetah.tasks.loaders import load_tasks
from cheetah.tasks.session import local_sessions
from cheetah.tasks.validate import validate_tasks

BENCH = TASK_SETS / "benchmark.jsonl"


def test_benchmark_shape():
    tasks = load_tasks(BENCH)
    assert len(tasks) >= 40
    repos = Counter(Path(t.snapshot.dir).name for t in tasks)
    assert len(repos) >= 5
    assert {"bugfix", "feature", "refactor", "tests"} <= {t.kind for t in tasks}
    easy = [t for t in tasks if t.tier == "easy"]
    assert len(easy) >= 10
    assert {t.split for t in easy} == {"train", "heldout"}
    for t in tasks:
        assert t.reference_patch and t.scope
        # the hidden material is not part of the repo the agent gets
        for rel in t.hidden_files:
            assert not (Path(t.snapshot.dir) / rel).exists(), (t.id, rel)


async def test_a_few_bundled_tasks_validate():
    tasks = {t.id: t for t in load_tasks(BENCH)}
    picked = [
        tasks[i]
        for i in ("algos-bisect-left-equal-run", "ledger-statement", "todocli-tests-render-list")
    ]
    results = await validate_tasks(picked, local_sessions("local"), concurrency=2)
    assert all(v.ok for v in results), [v.problems for v in results]


@pytest.mark.slow
# 55 tasks, several pytest runs each: three take 37 s on a busy 2-core machine, so all of them
# about 11 min, past the suite's 300 s. The checks bound their own hangs.
@pytest.mark.timeout(3600)
async def test_every_bundled_task_validates():
    results = await validate_tasks(load_tasks(BENCH), local_sessions("local"), concurrency=2)
    bad = {v.task_id: v.problems for v in results if not v.ok}
    assert not bad


async def test_a_test_writing_task_rejects_tests_that_catch_nothing():
    from cheetah.tasks.grader import capture_baseline, grade
    from cheetah.tasks.session import open_task

    task = next(t for t in load_tasks(BENCH) if t.id == "ledger-tests-balance")
    sessions = local_sessions("local")
    ws = await open_task(sessions, task)
    try:
        baseline = await capture_baseline(ws)
        await ws.write_files({"tests/test_balance.py": b"def test_nothing():\n    assert True\n"})
        g = await grade(task, ws, baseline, sessions)
    finally:
        await sessions.close(ws)
    assert not g.correct
    [check] = [c for c in g.checks if c.label == "tests catch mutants"]
    assert "mutant 1 survives" in check.detail
