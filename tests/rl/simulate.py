"""Discrete-event simulation of rollout scheduling, driving the real ``RolloutScheduler``
(a test double for the Ray driver; the scheduling tests and two benchmarks use it).

Model (all times in simulated seconds):
- a rollout has T turns, T ~ lognormal(median ``turns_median``, ``sigma``), in
  [1, ``max_turns``]; each turn is one generation then one tool step whose latency
  is lognormal(median ``tool_median_s``, ``sigma``);
- the engine fleet has ``engine_slots`` sequences decoding at once; a turn's
  generation holds one slot for ``tokens_per_turn * token_s`` and waits FIFO when
  all slots are busy (continuous batching in the decode-bound regime);
- workers: ``workers`` rollout slots (one agent loop and sandbox each);
- env servers: ``env_slots`` tool steps run at once over the whole fleet (0: no limit); a
  tool step holds a slot for its latency and waits FIFO when all are busy;
- the trainer takes ``groups_per_step`` groups per step of ``train_step_s``; after
  each step the new weights reach the engines and decoding pauses ``weight_sync_s``.
  Asynchronous: training overlaps generation, stale groups are dropped. Barrier:
  generate a batch of ``workers`` rollouts, wait for the last, train on all of it
  while the engines idle, then start the next batch.

Reported: rollouts trained per hour, engine utilization (busy slot-time over slot
capacity for the whole run, and for the steady state before the last rollout
starts, which leaves out the end-of-run drain), worker, env-server and trainer utilization,
the share of time decoding is paused for weight sync, staleness drops. Deliberately left out:
prefill cost, KV-cache pressure, interruption of in-flight generations at sync.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from cheetah.rl.scheduler import Finished, RolloutScheduler


@dataclass(frozen=True)
class SimConfig:
    workers: int = 1000
    rollouts: int = 100_000
    group_size: int = 8
    turns_median: float = 8.0
    tool_median_s: float = 1.0
    sigma: float = 1.5
    max_turns: int = 200
    tokens_per_turn: int = 200
    token_s: float = 0.02
    engine_slots: int = 512
    groups_per_step: int = 64
    train_step_s: float = 60.0
    weight_sync_s: float = 2.0
    max_staleness: int = 8
    env_slots: int = 0  # tool steps at once over all env servers (0: unlimited)
    seed: int = 0


@dataclass
class SimResult:
    mode: str
    makespan_s: float
    rollouts_trained: int
    rollouts_per_hour: float
    engine_utilization: float
    engine_utilization_steady: float  # until the last rollout has started (no end-of-run drain)
    worker_utilization: float
    groups_dropped_stale: int
    train_steps: int
    wall_s: float
    env_utilization: float = 0.0  # busy env slot-time over capacity (0 when unlimited)
    trainer_utilization: float = 0.0  # time the trainer steps over the run
    sync_pause_share: float = 0.0  # time decoding waits for weight sync over the run


def simulate(cfg: SimConfig, barrier: bool) -> SimResult:
    t_wall = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    n = cfg.rollouts
    # Draws for twice the budget: a stale group's rollouts are run again under new ids.
    turns = np.clip(
        np.rint(rng.lognormal(math.log(cfg.turns_median), cfg.sigma, 2 * n)), 1, cfg.max_turns
    ).astype(int)
    tool_draws = rng.lognormal(math.log(cfg.tool_median_s), cfg.sigma, int(turns.sum()))
    tool_offsets = np.concatenate([[0], np.cumsum(turns)])
    gen_s = cfg.tokens_per_turn * cfg.token_s

    sched = RolloutScheduler(
        lambda g: f"task-{g}",
        workers={w: 1 for w in range(cfg.workers)},
        group_size=cfg.group_size,
        max_in_flight=cfg.workers,
        groups_per_step=cfg.groups_per_step,
        max_staleness=cfg.max_staleness,
        barrier=barrier,
        max_rollouts=n,
    )
    events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, rollout id)
    seq = itertools.count()
    GEN_DONE, TOOL_DONE, TRAIN_DONE = 0, 1, 2
    env_queue: deque[tuple[int, float]] = deque()  # (rollout id, latency) waiting for a slot
    env_busy = 0
    env_busy_s = 0.0
    state: dict[int, list] = {}  # rollout id -> [spec, turns left, versions]
    queue: deque[int] = deque()
    busy = 0
    busy_slot_s = 0.0
    worker_busy_s = 0.0
    started_at: dict[int, float] = {}
    version = 0
    paused_until = 0.0
    training = False
    trained = 0
    steps = 0
    now = 0.0

    def start_gen(rid: int) -> None:
        nonlocal busy, busy_slot_s
        if busy >= cfg.engine_slots:
            queue.append(rid)
            return
        busy += 1
        begin = max(now, paused_until)
        busy_slot_s += gen_s
        state[rid][2].append(version)
        heapq.heappush(events, (begin + gen_s, next(seq), GEN_DONE, rid))

    def start_tool(rid: int, latency: float) -> None:
        nonlocal env_busy, env_busy_s
        if cfg.env_slots and env_busy >= cfg.env_slots:
            env_queue.append((rid, latency))
            return
        env_busy += 1
        env_busy_s += latency
        heapq.heappush(events, (now + latency, next(seq), TOOL_DONE, rid))

    def launch() -> None:
        for _, spec in sched.assign(trainer_busy=training):
            state[spec.rollout_id] = [spec, int(turns[spec.rollout_id]), []]
            started_at[spec.rollout_id] = now
            start_gen(spec.rollout_id)

    def maybe_train() -> None:
        nonlocal training
        if training:
            return
        batch = sched.take_batch(version)
        if batch is None:
            return
        training = True
        size = sum(len(g.rollouts) for g in batch)
        heapq.heappush(events, (now + cfg.train_step_s, next(seq), TRAIN_DONE, size))

    steady_end, steady_busy = None, 0.0
    launch()
    while events:
        now, _, kind, rid = heapq.heappop(events)
        if kind == GEN_DONE:
            busy -= 1
            if queue:
                start_gen(queue.popleft())
            spec, left, versions = state[rid]
            k = int(turns[rid]) - left
            start_tool(rid, float(tool_draws[tool_offsets[rid] + k]))
        elif kind == TOOL_DONE:
            env_busy -= 1
            if env_queue:
                start_tool(*env_queue.popleft())
            st = state[rid]
            st[1] -= 1
            if st[1] > 0:
                start_gen(rid)
                continue
            spec, _, versions = state.pop(rid)
            worker_busy_s += now - started_at.pop(rid)
            sched.finish(Finished(spec, reward=0.0, versions=versions))
            launch()
            maybe_train()
            if steady_end is None and sched.done_starting:
                steady_end, steady_busy = now, busy_slot_s - busy * gen_s
        else:  # TRAIN_DONE
            training = False
            trained += rid
            steps += 1
            version += 1
            paused_until = now + cfg.weight_sync_s
            maybe_train()
            launch()
    makespan = now
    return SimResult(
        mode="barrier" if barrier else "async",
        makespan_s=float(makespan),
        rollouts_trained=trained,
        rollouts_per_hour=float(trained / makespan * 3600),
        engine_utilization=float(busy_slot_s / (cfg.engine_slots * makespan)),
        engine_utilization_steady=float(
            steady_busy / (cfg.engine_slots * (steady_end or makespan))
        ),
        worker_utilization=float(worker_busy_s / (cfg.workers * makespan)),
        groups_dropped_stale=sched.stats.groups_dropped_stale,
        train_steps=steps,
        wall_s=time.perf_counter() - t_wall,
        env_utilization=float(env_busy_s / (cfg.env_slots * makespan)) if cfg.env_slots else 0.0,
        trainer_utilization=float(steps * cfg.train_step_s / makespan),
        sync_pause_share=float(min(1.0, steps * cfg.weight_sync_s / makespan)),
    )


def compare(cfg: SimConfig) -> dict:
    sync, async_ = simulate(cfg, barrier=True), simulate(cfg, barrier=False)
    return {
        "config": asdict(cfg),
        "barrier": asdict(sync),
        "async": asdict(async_),
        "throughput_ratio": async_.rollouts_per_hour / sync.rollouts_per_hour,
    }
