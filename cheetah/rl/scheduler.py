"""Rollout scheduling with no batch barrier: the same code drives Ray workers and the simulator.

The scheduler keeps up to ``max_in_flight`` rollouts running. Whenever a rollout
finishes, its slot is refilled at once (``assign``), on the worker with the fewest
rollouts in flight (least loaded), so a straggler holds one slot, never a batch.
G rollouts of one task form a group; a group is complete when all G have finished.
``take_batch`` hands the trainer ``groups_per_step`` complete groups as soon as they
exist, after dropping (and counting) groups whose oldest turn is more than
``max_staleness`` policy versions behind; a stale group's rollouts give back their share
of ``max_rollouts``, so a run still reaches its steps (new groups start at the current
version, so they cannot go stale before the next update: the loop ends). Rollouts in
flight are never cancelled by a weight update: they continue and record the version of
every turn.

A group with a rollout whose task could not run (``Finished.error``: a snapshot or
setup failure, or an episode the engine or env broke) is dropped and counted
(``groups_failed``); the run goes on.

Dynamic sampling (``dynamic_sampling=True``, DAPO): a complete group whose rewards are
all equal has zero advantage everywhere and teaches nothing; it is dropped (counted in
``groups_resampled``, handed to the driver in ``dropped``) and its rollout budget goes
to a new group, up to ``max_resampled`` times per run.

``barrier=True`` turns this into the synchronous baseline: a batch of rollouts is
started only when nothing is in flight, the buffer is empty and the trainer idle.

Pure bookkeeping: no clocks, no Ray, no I/O. Drivers call ``assign``, ``finish``,
``fail`` and ``take_batch``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RolloutSpec:
    rollout_id: int
    group_id: int
    task_id: str
    sample: int  # 0..G-1 within the group
    mode: str = "train"  # "eval": greedy, "sample": at the temperature; neither is trained on


@dataclass
class Finished:
    """One rollout's record, as it travels from a worker to the driver (through Ray)."""

    spec: RolloutSpec
    reward: float
    versions: list[int]  # policy version of each turn
    trajectory: str | None = None  # the Trajectory as JSON (parsed once, by the driver)
    error: str | None = None  # the task could not run, or the episode broke: group dropped

    @property
    def oldest_version(self) -> int:
        return min(self.versions) if self.versions else 0


@dataclass
class Group:
    group_id: int
    task_id: str
    size: int
    rollouts: list[Finished] = field(default_factory=list)
    dropped_as: str | None = None  # "stale", "resampled" or "failed" once dropped

    @property
    def complete(self) -> bool:
        return len(self.rollouts) == self.size

    @property
    def oldest_version(self) -> int:
        return min(r.oldest_version for r in self.rollouts)


@dataclass
class SchedulerStats:
    started: int = 0
    finished: int = 0
    failed: int = 0
    groups_trained: int = 0
    groups_dropped_stale: int = 0
    groups_resampled: int = 0  # dropped by dynamic sampling (all rewards equal), replaced
    groups_failed: int = 0  # dropped because their task could not run

    def lost(self) -> str:
        """Why a run can end short of its steps: groups dropped beyond what is replaced."""
        return (
            f"the rollout budget ran out: {self.groups_failed} groups whose task failed are "
            f"not replaced ({self.groups_dropped_stale} dropped as stale and "
            f"{self.groups_resampled} resampled were)"
        )


class RolloutScheduler:
    def __init__(
        self,
        task_for_group: Callable[[int], str | None],
        *,
        workers: dict[Hashable, int],
        group_size: int,
        max_in_flight: int,
        groups_per_step: int,
        max_staleness: int,
        barrier: bool = False,
        max_rollouts: int | None = None,
        dynamic_sampling: bool = False,
        max_resampled: int = 0,
    ) -> None:
        if group_size < 1 or groups_per_step < 1:
            raise ValueError("group_size and groups_per_step must be at least 1")
        self.task_for_group = task_for_group
        self.capacity = dict(workers)
        self.load: dict[Hashable, int] = dict.fromkeys(workers, 0)
        self.group_size, self.groups_per_step = group_size, groups_per_step
        self.max_in_flight, self.max_staleness = max_in_flight, max_staleness
        self.barrier, self.max_rollouts = barrier, max_rollouts
        self.dynamic_sampling, self.max_resampled = dynamic_sampling, max_resampled
        self.pending: deque[RolloutSpec] = deque()  # specs waiting for a slot (retries first)
        self.groups: dict[int, Group] = {}
        self.ready: deque[Group] = deque()
        self.in_flight: dict[int, Hashable] = {}
        self.stats = SchedulerStats()
        self.dropped: list[Group] = []  # stale or resampled groups, for the driver to record
        self._next_rollout = self._next_group = 0
        self._exhausted = False

    # -- starting rollouts ----------------------------------------------------
    def _new_group(self) -> bool:
        if self.max_rollouts is not None and self._next_rollout >= self.max_rollouts:
            return False
        gid = self._next_group
        task = self.task_for_group(gid)
        if task is None:
            self._exhausted = True
            return False
        self._next_group += 1
        self._next_rollout += self.group_size
        self.groups[gid] = Group(gid, task, self.group_size)
        self.pending.extend(self._spec(gid, task, k) for k in range(self.group_size))
        return True

    def _spec(self, gid: int, task: str, sample: int) -> RolloutSpec:
        # Ids follow from (group, sample), so a resumed run re-creates the same ids.
        return RolloutSpec(gid * self.group_size + sample, gid, task, sample)

    def restore(
        self,
        next_group: int,
        done_groups: set[int],
        finished: list[Finished],
        dropped: dict[str, int] | None = None,
    ) -> None:
        """Resume after a crash: groups below ``next_group`` exist; those in ``done_groups``
        were trained (or dropped); ``finished`` rollouts of the others come back as they
        were, and their samples that never finished are queued to run again. ``dropped``
        counts the groups dropped before, by why (``Group.dropped_as``): stale and
        resampled ones gave their rollouts back to ``max_rollouts`` and resampled ones
        count against ``max_resampled``, as they did before the crash."""
        dropped = dropped or {}
        self.stats.groups_dropped_stale = dropped.get("stale", 0)
        self.stats.groups_resampled = dropped.get("resampled", 0)
        self.stats.groups_failed = dropped.get("failed", 0)
        replaced = self.stats.groups_dropped_stale + self.stats.groups_resampled
        self._next_group = next_group
        self._next_rollout = (next_group - replaced) * self.group_size
        by_group: dict[int, list[Finished]] = {}
        for f in finished:
            by_group.setdefault(f.spec.group_id, []).append(f)
        for gid in range(next_group):
            if gid in done_groups:
                continue
            task = self.task_for_group(gid)
            if task is None:
                continue
            group = Group(gid, task, self.group_size, rollouts=list(by_group.get(gid, [])))
            if group.complete:
                self.ready.append(group)
                continue
            self.groups[gid] = group
            have = {f.spec.sample for f in group.rollouts}
            self.pending.extend(
                self._spec(gid, task, k) for k in range(self.group_size) if k not in have
            )

    def _least_loaded(self) -> Hashable | None:
        best, best_load = None, None
        for w, cap in self.capacity.items():
            load = self.load[w]
            if load < cap and (best_load is None or load / cap < best_load):
                best, best_load = w, load / cap
        return best

    def assign(self, trainer_busy: bool = False) -> list[tuple[Hashable, RolloutSpec]]:
        """Rollouts to start now, each with the worker to run it on. In barrier mode nothing
        starts while rollouts run, groups wait, or the trainer is busy."""
        if self.barrier and (self.in_flight or self.ready or trainer_busy):
            return []
        out = []
        while len(self.in_flight) < self.max_in_flight:
            if not self.pending and not self._new_group():
                break
            worker = self._least_loaded()
            if worker is None:
                break
            spec = self.pending.popleft()
            self.load[worker] += 1
            self.in_flight[spec.rollout_id] = worker
            self.stats.started += 1
            out.append((worker, spec))
        return out

    # -- results --------------------------------------------------------------
    def finish(self, result: Finished) -> None:
        worker = self.in_flight.pop(result.spec.rollout_id)
        if worker in self.load:
            self.load[worker] -= 1
        self.stats.finished += 1
        group = self.groups[result.spec.group_id]
        group.rollouts.append(result)
        if group.complete:
            del self.groups[group.group_id]
            if any(r.error for r in group.rollouts):
                self.stats.groups_failed += 1
                group.dropped_as = "failed"
                self.dropped.append(group)
            elif self._uninformative(group):
                # Dropped and replaced: its rollouts give back their share of the budget.
                self.stats.groups_resampled += 1
                group.dropped_as = "resampled"
                self.dropped.append(group)
                self._next_rollout -= self.group_size
            else:
                self.ready.append(group)

    def _uninformative(self, group: Group) -> bool:
        if not self.dynamic_sampling or self.stats.groups_resampled >= self.max_resampled:
            return False
        rewards = [r.reward for r in group.rollouts]
        return max(rewards) - min(rewards) < 1e-9

    def fail(self, spec: RolloutSpec, worker_lost: bool = False) -> None:
        """A rollout did not complete (its worker died): run it again, first in line."""
        worker = self.in_flight.pop(spec.rollout_id)
        if worker in self.load:
            self.load[worker] -= 1
        self.stats.failed += 1
        if worker_lost:
            self.capacity.pop(worker, None)
            self.load.pop(worker, None)
        self.pending.appendleft(spec)

    def add_worker(self, worker: Hashable, capacity: int) -> None:
        self.capacity[worker] = capacity
        self.load.setdefault(worker, 0)

    def take_batch(self, version: int) -> list[Group] | None:
        """``groups_per_step`` complete, fresh-enough groups, or None if there are not enough."""
        fresh = deque()
        for g in self.ready:
            if version - g.oldest_version > self.max_staleness:
                self.stats.groups_dropped_stale += 1
                g.dropped_as = "stale"
                self.dropped.append(g)
                self._next_rollout -= self.group_size  # trained on nothing: budget back
            else:
                fresh.append(g)
        self.ready = fresh
        if len(self.ready) < self.groups_per_step:
            # A short batch only when nothing more can arrive for it: after a barrier batch,
            # or at the end of the run.
            flush = self.ready and not self.in_flight and (self.barrier or self.done_starting)
            if not flush:
                return None
        n = min(self.groups_per_step, len(self.ready))
        batch = [self.ready.popleft() for _ in range(n)]
        self.stats.groups_trained += len(batch)
        return batch

    @property
    def done_starting(self) -> bool:
        if self.max_rollouts is not None and self._next_rollout >= self.max_rollouts:
            return not self.pending
        return self._exhausted and not self.pending

    @property
    def idle(self) -> bool:
        return self.done_starting and not self.in_flight
