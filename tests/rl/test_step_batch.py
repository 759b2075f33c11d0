"""The step batch's metrics from graded rollouts (``rl/step_batch.py``)."""

from cheetah.harness.trajectory import Trajectory
from cheetah.rl.scheduler import Finished, Group, RolloutSpec
from cheetah.rl.step_batch import build_step_batch


def test_the_step_counts_rollouts_whose_change_was_flagged():
    def finished(i: int, flags: list[str]) -> Finished:
        traj = Trajectory(query="q", policy="p", grade={"reward": 0.0, "flags": flags})
        return Finished(RolloutSpec(i, 0, "t", i), 0.0, [0], traj.model_dump_json())

    group = Group(
        0, "t", 3, [finished(0, ["calc/ops.py: reaches"]), finished(1, []), finished(2, [])]
    )
    batch = build_step_batch([group], tokenizer=None, max_len=64)
    assert batch.metrics["grade_flagged"] == 1
