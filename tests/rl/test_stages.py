"""Held-out stages: per-stage rates with Wilson intervals, tiers, behaviour, paired tests."""

import pytest

from cheetah.harness.trajectory import CallRecord, Trajectory, Turn
from cheetah.rl.stages import stage_record, summarize, table
from cheetah.tasks.schema import Task

PATCH = "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def task(i: int, tier: str = "easy") -> Task:
    return Task(
        id=f"t{i}",
        query="fix it",
        snapshot={"dir": "repo"},
        fail_to_pass=["tests/test_m.py::test_x"],
        reference_patch=PATCH,
        tier=tier,
    )


def traj(correct: bool, edit_path: str = "pkg/m.py", malformed: bool = False) -> Trajectory:
    calls = [
        CallRecord(index=1, name="read_file", args={"path": edit_path}, output="..."),
        CallRecord(
            index=2,
            name="edit_file",
            args={"path": f"./{edit_path}", "old_str": "x = 1", "new_str": "x = 2"},
            output="Edited" if correct else "Error: <old_str> does not occur",
            is_error=not correct,
        ),
    ]
    if malformed:
        calls.append(
            CallRecord(
                index=3, name="", args={}, output="Error", is_error=True, meta={"malformed": True}
            )
        )
    turns = [
        Turn(index=1, assistant="...", calls=calls[:1], finish_reason="stop"),
        Turn(index=2, assistant="...", calls=calls[1:], finish_reason="length"),
    ]
    return Trajectory(query="q", turns=turns, grade={"correct": correct})


def test_stage_record_counts_rates_tiers_and_behaviour():
    graded = [
        (task(0), traj(True)),
        (task(1), traj(False, malformed=True)),
        (task(2, "hard"), None),
    ]
    s = stage_record("sft", graded)
    assert (s["tasks"], s["solved"]) == (3, 1) and s["pass_rate"] == pytest.approx(1 / 3)
    assert s["ci95"][0] < 1 / 3 < s["ci95"][1]
    assert s["per_tier"] == {
        "easy": {"tasks": 2, "solved": 1, "pass_rate": 0.5},
        "hard": {"tasks": 1, "solved": 0, "pass_rate": 0.0},
    }
    assert s["per_repo"] == {"repo": {"tasks": 3, "solved": 1}}
    assert s["errors"] == ["t2"] and s["solved_tasks"] == {"t0": True, "t1": False, "t2": False}
    b = s["behaviour"]
    assert b["parse_rate"] == pytest.approx(4 / 5)
    assert b["old_str_match_rate"] == pytest.approx(0.5)
    assert b["right_file_edit_rate"] == pytest.approx(0.5)  # ./pkg/m.py counts as pkg/m.py
    assert b["truncated_turn_share"] == pytest.approx(0.5)


def test_summary_compares_consecutive_stages_and_last_with_base():
    tasks = [task(i) for i in range(8)]
    base = stage_record("base", [(t, traj(False)) for t in tasks])
    sft = stage_record("sft", [(t, traj(i < 3)) for i, t in enumerate(tasks)])
    rl = stage_record("rl", [(t, traj(i < 7)) for i, t in enumerate(tasks)])
    summary = summarize([base, sft, rl])
    pairs = [(c["before"], c["after"], c["only_after"]) for c in summary["comparisons"]]
    assert pairs == [("base", "sft", 3), ("sft", "rl", 4), ("base", "rl", 7)]
    assert summary["mcnemar_p"] == pytest.approx(2 / 2**7)
    text = table(summary)
    assert "rl vs base: solved only after 7" in text and text.count("\n") == 6


def test_the_table_breaks_solved_tasks_down_by_tier_and_repo():
    def on(i: int, tier: str, snapshot: dict) -> Task:
        return Task.model_validate(task(i, tier).model_dump() | {"snapshot": snapshot})

    tasks = [
        on(0, "line", {"dir": "/x/repos/algos"}),
        on(1, "locate", {"dir": "/x/repos/algos"}),
        on(2, "line", {"package": "tinydb==4.9.0", "patch": PATCH}),
        on(3, "line", {"package": "tinydb==4.9.0", "patch": PATCH}),
    ]
    base = stage_record("base", [(t, traj(False)) for t in tasks])
    rl = stage_record("rl", [(t, traj(i != 1 and i != 3)) for i, t in enumerate(tasks)])
    assert rl["per_repo"] == {
        "algos": {"tasks": 2, "solved": 1},
        "tinydb": {"tasks": 2, "solved": 1},
    }
    rows = {
        line.split()[0] + " " + line.split()[1]: line.split()[2:]
        for line in table(summarize([base, rl])).splitlines()
        if line.startswith(("tier ", "repo "))
    }
    assert rows == {
        "tier line": ["0/3", "2/3"],
        "tier locate": ["0/1", "0/1"],
        "repo algos": ["0/2", "1/2"],
        "repo tinydb": ["0/2", "1/2"],
    }


def test_one_tier_and_one_repo_add_no_breakdown():
    tasks = [task(i) for i in range(3)]
    text = table(summarize([stage_record("sft", [(t, traj(True)) for t in tasks])]))
    assert "solved by" not in text and "repo " not in text


def _turns(n: int, calls_first: int = 1) -> Trajectory:
    """``n`` turns, ``calls_first`` reads in the first, one read in each other but the last."""
    turns = [
        Turn(
            index=i,
            assistant="...",
            calls=[
                CallRecord(index=k, name="read_file", args={"path": "a"}, output="")
                for k in range(calls_first if i == 0 else 1)
            ],
        )
        for i in range(n - 1)
    ]
    turns.append(Turn(index=n - 1, assistant="done"))
    return Trajectory(query="q", turns=turns, grade={"correct": True})


def test_turns_and_calls_per_turn_are_compared_task_by_task():
    tasks = [task(i) for i in range(8)]
    sft = stage_record("sft", [(t, _turns(4)) for t in tasks])
    rl = stage_record("rl", [(t, _turns(3, calls_first=2)) for t in tasks[:7]] + [(tasks[7], None)])
    assert rl["behaviour"]["turns_per_task"] == pytest.approx(3.0)
    assert rl["behaviour"]["calls_per_turn"] == pytest.approx(1.5)
    assert rl["behaviour"]["explore_before_edit"] == pytest.approx(3.0)  # no edit: every call
    [c] = summarize([sft, rl])["comparisons"]
    assert c["paired_tasks"] == 7  # the task rl could not run is left out
    assert c["turns_change"] == pytest.approx(-1.0) and c["turns_p"] == pytest.approx(2 / 2**7)
    assert c["calls_change"] == pytest.approx(0.5) and c["calls_p"] == pytest.approx(2 / 2**7)
    assert "turns/task -1.00 (Wilcoxon p = 0.016)" in table(summarize([sft, rl]))


def test_the_learning_curve_runs_from_the_warm_start_through_rl():
    from cheetah.rl.stages import curve_metrics, learning_curve

    tasks = [task(i) for i in range(4)]
    base = stage_record("base", [(t, traj(False)) for t in tasks])
    sft = stage_record("sft", [(t, _turns(4)) for t in tasks])
    mid = stage_record("rl-2", [(t, _turns(3)) for t in tasks])
    rl = stage_record("rl", [(t, _turns(2)) for t in tasks])
    curve = learning_curve([base, sft, rl], {2: mid}, steps=4, per_step=16)
    assert [(p["step"], p["rollouts"], p["turns_per_task"]) for p in curve] == [
        (0, 0, 4.0),
        (2, 32, 3.0),
        (4, 64, 2.0),
    ]
    assert learning_curve([base], {}, steps=4, per_step=16)[0]["step"] == 0  # no SFT: base
    m = curve_metrics(mid)
    assert m["heldout_pass_rate"] == 1.0 and m["heldout_turns_per_task"] == 3.0


class _Worker:
    """A rollout worker's handle (``worker.run.remote(spec)``) over canned outcomes: task
    ``t0`` is solved greedily and by one sample in four, ``t1`` only by samples 1 and 2, ``t2``
    never; sample 3 of ``t2`` cannot run."""

    def __init__(self, seen: list) -> None:
        self.seen = seen
        self.run = self

    def remote(self, spec):
        from cheetah.rl.scheduler import Finished

        async def go():
            self.seen.append(spec)
            if spec.task_id == "t2" and spec.sample == 3:
                return Finished(spec, reward=0.0, versions=[], error="the env broke")
            solved = {"eval": spec.task_id == "t0"}.get(spec.mode)
            if solved is None:  # sampled
                solved = (spec.task_id, spec.sample) in {("t0", 0), ("t1", 1), ("t1", 2)}
            return Finished(spec, 1.0, [0], trajectory=traj(solved).model_dump_json())

        return go()


async def test_a_stage_samples_its_sampled_tasks_for_pass_at_k():
    from cheetah.rl.stages import run_stage

    seen: list = []
    tasks = [task(i) for i in range(3)]
    stage = await run_stage("sft", tasks, [_Worker(seen), _Worker(seen)], lambda _: None,
                            {"t0": 4, "t1": 4, "t2": 4})  # fmt: skip
    assert stage["solved"] == 1 and stage["tasks"] == 3  # the greedy pass
    assert sorted((s.mode, s.task_id) for s in seen).count(("sample", "t1")) == 4
    assert len({s.rollout_id for s in seen}) == len(seen) == 3 + 12  # none reused
    p = stage["pass_at_k"]
    assert (p["k"], p["tasks"], p["samples"], p["errors"]) == (4, 3, 12, 1)
    assert p["pass_at_k"] == pytest.approx(2 / 3) and p["solved_by_any"] == ["t0", "t1"]
    assert p["pass_at_1"] == pytest.approx((1 / 4 + 2 / 4 + 0) / 3)
    assert "pass@4 at the rollout temperature: sft 0.67" in table(summarize([stage]))
    plain = await run_stage("base", tasks, [_Worker([])], lambda _: None)
    assert "pass_at_k" not in plain and "pass@" not in table(summarize([plain]))
