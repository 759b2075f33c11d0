import pytest

from cheetah.harness.trajectory import CallRecord, Trajectory, Turn
from cheetah.tasks.metrics import behaviour, pass_at_k, trajectory_metrics


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # 1 - C(7,5)/C(10,5) = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(0, 0, 1)


def call(i, name, is_error=False, **args):
    return CallRecord(index=i, name=name, args=args, output="", is_error=is_error)


def test_trajectory_metrics():
    traj = Trajectory(
        query="q",
        turns=[
            Turn(
                index=0,
                assistant="",
                calls=[call(1, "read_file"), call(2, "grep"), call(3, "list_dir")],
            ),
            Turn(index=1, assistant="", calls=[call(1, "edit_file"), call(2, "read_file")]),
            Turn(
                index=2,
                assistant="",
                calls=[call(1, "edit_file", is_error=True, path="a", old_str="x", new_str="x")],
            ),
            Turn(index=3, assistant="done", completion_tokens=5),
        ],
    )
    m = trajectory_metrics(traj)
    assert m["tool_calls"] == 6
    assert m["calls_per_turn"] == pytest.approx(2.0)
    assert m["max_calls_in_turn"] == 3
    assert m["explore_before_edit"] == 3
    assert m["first_edit_turn"] == 1
    assert m["edits"] == 1
    assert m["tool_errors"] == 1
    assert m["noop_edits"] == 1 and m["turns"] == 4
    assert m["false_claim"] == 0  # "done" claims no change (and one edit went through)
    b = behaviour(
        [traj, Trajectory(query="q", turns=[Turn(index=0, assistant="done")])], [None] * 2
    )
    assert b["turns_per_task"] == pytest.approx(2.5) and b["noop_edits"] == pytest.approx(0.5)
    assert b["explore_before_edit"] == pytest.approx(1.5)
    assert b["false_claims"] == 0.0  # "done" claims nothing
    liar = Trajectory(query="q", turns=[Turn(index=0, assistant="I changed `a` to `b`.")])
    assert behaviour([traj, liar], [None] * 2)["false_claims"] == pytest.approx(0.5)
    assert m["completion_tokens"] == 5
