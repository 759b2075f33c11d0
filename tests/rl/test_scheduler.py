import pytest

from cheetah.rl.scheduler import Finished, RolloutScheduler
from tests.rl.simulate import SimConfig, simulate


def sched(**kw):
    args = dict(
        workers={"a": 2, "b": 2}, group_size=2, max_in_flight=4, groups_per_step=1, max_staleness=2
    )
    args.update(kw)
    return RolloutScheduler(lambda g: f"t{g}", **args)


def test_fills_slots_least_loaded_first_and_refills_without_barrier():
    s = sched()
    started = s.assign()
    assert [w for w, _ in started] == ["a", "b", "a", "b"]
    assert [(sp.task_id, sp.sample) for _, sp in started] == [
        ("t0", 0),
        ("t0", 1),
        ("t1", 0),
        ("t1", 1),
    ]
    assert s.assign() == []  # full
    s.finish(Finished(started[1][1], 1.0, [0]))  # one rollout of t0 done: its slot refills at once
    [(w, spec)] = s.assign()
    assert w == "b" and spec.task_id == "t2"
    assert s.take_batch(0) is None  # t0 is not complete yet
    s.finish(Finished(started[0][1], 0.0, [0]))
    [group] = s.take_batch(0)
    assert group.task_id == "t0" and sorted(r.reward for r in group.rollouts) == [0.0, 1.0]


def test_stale_groups_are_dropped_and_counted():
    s = sched(max_staleness=2)
    started = s.assign()
    for _, spec in started[:2]:
        s.finish(Finished(spec, 1.0, [0, 3]))  # group t0 began at version 0
    for _, spec in started[2:]:
        s.finish(Finished(spec, 1.0, [2, 3]))  # group t1 began at version 2
    [group] = s.take_batch(version=3)
    assert group.task_id == "t1" and s.stats.groups_dropped_stale == 1
    assert "(1 dropped as stale and 0 resampled were)" in s.stats.lost()


def test_a_stale_groups_budget_goes_to_a_new_group():
    s = sched(max_staleness=0, max_rollouts=4)  # two groups of 2
    started = s.assign()
    assert len(started) == 4 and s.assign() == []
    for _, spec in started[:2]:
        s.finish(Finished(spec, 1.0, [0]))  # t0, before the update
    [trained] = s.take_batch(version=0)
    for _, spec in started[2:]:
        s.finish(Finished(spec, 1.0, [0]))  # t1 began at version 0: stale at version 1
    assert s.take_batch(version=1) is None and s.stats.groups_dropped_stale == 1
    again = s.assign()  # the stale group's two rollouts run again, as a new group
    assert trained.task_id == "t0" and len(again) == 2 and {sp.group_id for _, sp in again} == {2}
    for _, spec in again:
        s.finish(Finished(spec, 0.0, [1]))
    [group] = s.take_batch(version=1)
    assert group.task_id == "t2" and s.idle  # two groups trained: the budget is spent


def test_barrier_mode_waits_for_the_whole_batch_and_the_trainer():
    s = sched(barrier=True, groups_per_step=2)
    started = s.assign()
    for _, spec in started[:3]:
        s.finish(Finished(spec, 1.0, [0]))
    assert s.assign() == []  # one rollout still running: no new work
    s.finish(Finished(started[3][1], 1.0, [0]))
    assert len(s.take_batch(0)) == 2
    assert s.assign(trainer_busy=True) == []
    assert len(s.assign(trainer_busy=False)) == 4


def test_failed_rollouts_are_retried_first_and_lost_workers_removed():
    s = sched()
    started = s.assign()
    lost = [sp for w, sp in started if w == "a"]
    for sp in lost:
        s.fail(sp, worker_lost=True)
    assert "a" not in s.capacity and s.stats.failed == 2
    again = s.assign()
    assert [sp.rollout_id for _, sp in again] == [lost[1].rollout_id, lost[0].rollout_id][
        : len(again)
    ]
    assert all(w == "b" for w, _ in again)


def test_max_rollouts_and_end_of_run_flush():
    s = sched(max_rollouts=4, groups_per_step=3)
    started = s.assign()
    assert len(started) == 4 and s.assign() == []
    for _, sp in started:
        s.finish(Finished(sp, 1.0, [0]))
    assert s.idle
    assert len(s.take_batch(0)) == 2  # fewer than groups_per_step, but nothing more will come


def test_bad_arguments():
    with pytest.raises(ValueError):
        sched(group_size=0)


def test_simulation_async_beats_barrier_on_heavy_tails():
    cfg = SimConfig(workers=100, rollouts=4000, engine_slots=50, groups_per_step=8)
    sync, async_ = simulate(cfg, barrier=True), simulate(cfg, barrier=False)
    assert sync.rollouts_trained == 4000
    assert async_.rollouts_trained == 4000  # stale groups are replaced, not lost
    assert async_.rollouts_per_hour > 3 * sync.rollouts_per_hour
    assert async_.engine_utilization_steady > 0.9 > sync.engine_utilization


def test_simulated_env_servers_queue_tool_steps_when_full():
    import dataclasses

    cfg = SimConfig(workers=100, rollouts=2000, engine_slots=100, groups_per_step=8)
    free = simulate(cfg, barrier=False)
    tight = simulate(dataclasses.replace(cfg, env_slots=5), barrier=False)
    assert free.env_utilization == 0.0  # no limit, nothing to report
    assert tight.env_utilization > 0.9  # five slots for a hundred rollouts: always busy
    assert tight.rollouts_per_hour < 0.5 * free.rollouts_per_hour
    assert 0 < free.trainer_utilization <= 1 and 0 < free.sync_pause_share < 1


def test_restore_brings_back_untrained_work_and_reruns_only_what_never_finished():
    s = sched(group_size=2, max_in_flight=8)
    # Before the crash: group 0 trained, group 1 complete but untrained, group 2 half done,
    # group 3 started but nothing finished.
    from cheetah.rl.scheduler import RolloutSpec

    def fin(gid, k):
        return Finished(RolloutSpec(gid * 2 + k, gid, f"t{gid}", k), 1.0, [0])

    s.restore(next_group=4, done_groups={0}, finished=[fin(1, 0), fin(1, 1), fin(2, 1)])
    [g1] = s.take_batch(0)
    assert g1.group_id == 1 and len(g1.rollouts) == 2
    started = s.assign()
    ids = [sp.rollout_id for _, sp in started]
    assert ids[:3] == [4, 6, 7]  # group 2 sample 0, group 3 both samples: never run twice
    assert ids[3] == 8 and started[3][1].task_id == "t4"  # then new groups continue the cursor


def test_dynamic_sampling_replaces_groups_without_a_reward_difference():
    s = sched(max_rollouts=4, dynamic_sampling=True, max_resampled=1)
    started = s.assign()
    for _, spec in started[:2]:
        s.finish(Finished(spec, 0.0, [0]))  # t0: all equal -> dropped, its budget freed
    assert s.stats.groups_resampled == 1 and [g.task_id for g in s.dropped] == ["t0"]
    assert s.take_batch(0) is None
    [(_, a), (_, b)] = s.assign()  # a replacement group starts in t0's place
    assert a.task_id == b.task_id == "t2"
    s.finish(Finished(started[2][1], 1.0, [0]))
    s.finish(Finished(started[3][1], 0.0, [0]))
    [group] = s.take_batch(0)
    assert group.task_id == "t1"  # a reward difference: kept
    s.finish(Finished(a, 0.5, [0]))
    s.finish(Finished(b, 0.5, [0]))  # equal again, but the resample budget (1) is spent
    [group] = s.take_batch(0)
    assert group.task_id == "t2" and s.stats.groups_resampled == 1 and s.idle


def test_a_resume_keeps_the_budget_dropped_groups_gave_back_and_the_resamples_spent(tmp_path):
    """A group replaced by dynamic sampling gave its rollouts back to ``max_rollouts`` and
    spent one of ``max_resampled``; a resume from the run store does the same sums."""
    from cheetah.rl.store import DROPPED, RunStore

    def run():
        return sched(max_rollouts=6, dynamic_sampling=True, max_resampled=1)  # 3 groups

    store = RunStore(tmp_path / "run.sqlite")
    s = run()
    started = {sp.rollout_id: sp for _, sp in s.assign()}  # groups 0 and 1

    def finish(sched_, spec, reward):
        sched_.finish(Finished(spec, reward, [0]))
        store.add_rollout(
            spec.rollout_id, spec.group_id, spec.task_id, spec.sample, reward, [0], None
        )

    for spec in started.values():
        finish(s, spec, 1.0 if spec.rollout_id == 2 else 0.0)  # group 0 all equal: resampled
    [group] = s.take_batch(0)
    assert group.group_id == 1 and s.stats.groups_resampled == 1
    for g in s.dropped:
        store.mark_trained([x.spec.rollout_id for x in g.rollouts], DROPPED[g.dropped_as])
    store.mark_trained([x.spec.rollout_id for x in group.rollouts], 1)
    # group 0's place and the last group start; a crash before either finishes
    assert [sp.group_id for _, sp in s.assign()] == [2, 2, 3, 3]
    assert store.dropped_groups() == {"resampled": 1}

    again = run()
    again.restore(2, store.done_groups(), store.untrained(), store.dropped_groups())
    assert again.stats.groups_resampled == 1
    restarted = [sp for _, sp in again.assign()]
    assert [sp.group_id for sp in restarted] == [2, 2, 3, 3]  # as before the crash
    for spec in restarted[:2]:
        finish(again, spec, 0.0)  # all equal, but the one resample of the run is spent
    [kept] = again.take_batch(1)
    assert kept.group_id == 2 and again.stats.groups_resampled == 1
