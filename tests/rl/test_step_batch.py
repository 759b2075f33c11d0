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


def test_the_step_counts_rollouts_a_limit_stopped_and_those_the_token_cap_ended():
    from cheetah.harness.trajectory import CallRecord, Turn

    def finished(i: int, stop: str, last: Turn) -> Finished:
        traj = Trajectory(query="q", policy="p", stop_reason=stop, turns=[last], grade={})
        return Finished(RolloutSpec(i, 0, "t", i), 0.0, [0], traj.model_dump_json())

    cut = Turn(index=0, assistant="I will re", finish_reason="length")
    call = CallRecord(index=1, name="list_dir", args={}, output="a.py")
    cut_with_call = Turn(index=0, assistant="...", finish_reason="length", calls=[call])
    answered = Turn(index=0, assistant="Done.", finish_reason="stop")
    rollouts = [
        finished(0, "limit", cut),  # the cap cut its reply: a limit, not an answer
        finished(1, "limit", cut_with_call),  # cut, but its calls ran; then the turn limit
        finished(2, "finished", answered),
    ]
    batch = build_step_batch([Group(0, "t", 3, rollouts)], tokenizer=None, max_len=64)
    m = batch.metrics
    assert m["turns_cut_by_max_new_tokens"] == 2
    assert m["rollouts_stopped_by_limit"] == 2 and m["rollouts_ended_by_max_new_tokens"] == 1
