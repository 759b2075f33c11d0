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
        "easy": {"tasks": 2, "pass_rate": 0.5},
        "hard": {"tasks": 1, "pass_rate": 0.0},
    }
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
