from cheetah.tasks.session import TaskSessionOpener, local_sessions
from cheetah.tasks.validate import validate_task, validate_tasks

from .conftest import OPS, bug_task


async def test_valid_task_passes(calc_task):
    v = await validate_task(calc_task, local_sessions("local"))
    assert v.ok, v.problems


async def test_fail_to_pass_that_already_passes_is_reported(calc_repo):
    task = bug_task(calc_repo, fail_to_pass=["tests/test_ops.py::test_clamp"], pass_to_pass=[])
    v = await validate_task(task, local_sessions("local"))
    assert not v.ok
    assert any(
        "fail_to_pass check 'tests/test_ops.py::test_clamp' should fail on the snapshot" in p
        for p in v.problems
    )


async def test_reference_patch_that_does_not_fix_is_reported(calc_repo):
    from cheetah.tasks.patch import diff_texts

    useless = diff_texts("NOTES.md", None, "nothing\n")
    v = await validate_task(bug_task(calc_repo, reference_patch=useless), local_sessions("local"))
    assert any("should pass with the reference patch but was failed" in p for p in v.problems)
    broken = diff_texts("calc/ops.py", "not it\n", OPS)
    v = await validate_task(bug_task(calc_repo, reference_patch=broken), local_sessions("local"))
    assert any("reference patch does not apply" in p for p in v.problems)


async def test_leaked_hidden_file_and_bad_snapshot_do_not_stop_the_others(calc_repo, tmp_path):
    from .conftest import HIDDEN

    (calc_repo / "tests" / "test_hidden.py").write_text(HIDDEN)
    leaky = bug_task(calc_repo, id="leaky")
    missing = bug_task(calc_repo, id="missing", snapshot={"dir": str(tmp_path / "gone")})
    results = await validate_tasks([leaky, missing], local_sessions("local"), concurrency=2)
    by_id = {v.task_id: v for v in results}
    assert any("already in the snapshot" in p for p in by_id["leaky"].problems)
    assert by_id["missing"].problems[0].startswith("snapshot: snapshot directory")


async def test_tasks_that_differ_only_in_their_query_are_validated_once(calc_repo):
    class Counting(TaskSessionOpener):
        opened = 0

        async def create(self, task):
            Counting.opened += 1
            return await super().create(task)

    named = bug_task(calc_repo, id="named", tier="named")
    vague = bug_task(calc_repo, id="vague", tier="behaviour", query="Sums are wrong. Fix it.")
    unsolved = bug_task(calc_repo, id="unsolved", reference_patch=None)
    seen: list[str] = []
    results = await validate_tasks(
        [named, vague, unsolved],
        Counting(local_sessions("local").env),
        concurrency=2,
        on_done=lambda v: seen.append(v.task_id),
    )
    assert [v.task_id for v in results] == ["named", "vague", "unsolved"]
    assert results[0].ok and results[1].ok and not results[2].ok
    assert sorted(seen) == ["named", "unsolved", "vague"]
    assert Counting.opened == 3  # named+vague: snapshot and patched (2); unsolved: snapshot only
