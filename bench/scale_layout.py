"""Where the largest layout this design targets saturates first: engines, env servers, weight
sync or the trainer. A discrete-event simulation driving the real ``RolloutScheduler``
(``tests.rl.simulate``) with figures derived from the layout below.

The layout (defaults; every figure is a flag): 8 nodes of 8 GPUs; an 8B-parameter policy in
bf16; 48 GPUs serve it (one engine each, 64 sequences decoding at once at 30 tokens/s each);
16 GPUs train it (``train.world_size = 16``, 3,000 trained tokens/s per GPU: an 8B model with
FSDP and activation checkpointing at about 40% of an H100's bf16 peak); 32 env-server hosts
with 64 tool steps at once each; 2,048 rollouts in flight (one sandbox each). An agent
rollout: lognormal turns (median 8, sigma 1.5), 200 generated tokens a turn, tool latency
lognormal (median 1 s), ~6,300 tokens trained per rollout; a step is 64 groups of 8.

Derived: the trainer step time is the step's tokens over the trainer's throughput; a weight
sync is the gather over the trainer's interconnect, the checkpoint written to the shared
filesystem, and every engine reading it back through the filesystem's aggregate bandwidth
(what ``model.engine_urls`` does today: the engines pause decoding meanwhile).

Printed: (1) the layout's figures and utilizations (engine, env servers, trainer, share of
time paused for sync); (2) what doubling each resource alone does to throughput, in the
same run: of engines, env servers, trainer and weight sync, the one whose doubling helps
most is where the layout saturates first (rollouts in flight and the staleness bound are
shown beside them: they are settings, not machines).

    python bench/scale_layout.py [--rollouts 30000] [--engines 48] [--trainer-gpus 16] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the simulation lives in tests/

from tests.rl.simulate import SimConfig, SimResult, simulate


def derive(a: argparse.Namespace) -> tuple[SimConfig, dict[str, float]]:
    step_rollouts = a.groups_per_step * a.group_size
    train_step_s = step_rollouts * a.tokens_per_rollout / (a.trainer_gpus * a.train_tok_s)
    model_gb = a.params * 2 / 1e9  # bf16
    gather_s = model_gb / a.interconnect_gbs
    write_s = model_gb / a.fs_write_gbs
    read_s = a.engines * model_gb / a.fs_read_gbs  # every engine reads the whole checkpoint
    sync_s = gather_s + write_s + read_s
    cfg = SimConfig(
        workers=a.in_flight,
        rollouts=a.rollouts,
        group_size=a.group_size,
        turns_median=a.turns,
        tool_median_s=a.tool_s,
        tokens_per_turn=a.tokens_per_turn,
        token_s=1.0 / a.seq_tok_s,
        engine_slots=a.engines * a.engine_seqs,
        groups_per_step=a.groups_per_step,
        train_step_s=train_step_s,
        weight_sync_s=sync_s,
        max_staleness=a.max_staleness,
        env_slots=a.env_hosts * a.env_slots_per_host,
    )
    parts = {"gather_s": gather_s, "write_s": write_s, "read_s": read_s}
    return cfg, parts


def line(name: str, r: SimResult, base: float | None = None) -> str:
    gain = f"{r.rollouts_per_hour / base:6.2f}x" if base else "      "
    return (
        f"  {name:<28} {r.rollouts_per_hour:10.0f} {gain} {r.engine_utilization_steady:7.2f} "
        f"{r.env_utilization:7.2f} {r.trainer_utilization:8.2f} {r.sync_pause_share:7.2f} "
        f"{r.groups_dropped_stale:7d}"
    )


HEADER = (
    f"  {'':<28} {'rollouts/h':>10} {'gain':>7} {'engine':>7} {'env':>7} {'trainer':>8} "
    f"{'sync':>7} {'stale':>7}"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = ap.add_argument
    add("--rollouts", type=int, default=30_000, help="rollouts simulated per configuration")
    add("--in-flight", type=int, default=2048, help="rollouts in flight (sandboxes)")
    add("--params", type=float, default=8e9, help="policy parameters (bf16)")
    add("--engines", type=int, default=48, help="engine GPUs (one server each)")
    add("--engine-seqs", type=int, default=64, help="sequences one engine decodes at once")
    add("--seq-tok-s", type=float, default=30.0, help="decode tokens/s of one sequence")
    add("--trainer-gpus", type=int, default=16, help="train.world_size")
    add("--train-tok-s", type=float, default=3000.0, help="trained tokens/s per trainer GPU")
    add("--env-hosts", type=int, default=32)
    add("--env-slots-per-host", type=int, default=64, help="tool steps at once per env host")
    add("--interconnect-gbs", type=float, default=25.0, help="GB/s of the trainer's gather")
    add("--fs-write-gbs", type=float, default=2.0, help="GB/s writing the checkpoint")
    add("--fs-read-gbs", type=float, default=20.0, help="aggregate GB/s engines read it")
    add("--turns", type=float, default=8.0, help="median turns per rollout")
    add("--tokens-per-turn", type=int, default=200)
    add("--tool-s", type=float, default=1.0, help="median tool latency")
    add("--tokens-per-rollout", type=int, default=6300, help="tokens trained per rollout")
    add("--group-size", type=int, default=8)
    add("--groups-per-step", type=int, default=64)
    add("--max-staleness", type=int, default=8)
    a = ap.parse_args()

    cfg, parts = derive(a)
    t0 = time.perf_counter()
    print(
        f"layout: {a.engines} engine GPUs x {a.engine_seqs} seqs, {a.trainer_gpus} trainer GPUs, "
        f"{a.env_hosts} env hosts x {a.env_slots_per_host}, {a.in_flight} rollouts in flight, "
        f"{a.params / 1e9:.0f}B params"
    )
    print(
        f"derived: train step {cfg.train_step_s:.1f} s ({a.groups_per_step * a.group_size} "
        f"rollouts), weight sync {cfg.weight_sync_s:.1f} s (gather {parts['gather_s']:.1f} + "
        f"write {parts['write_s']:.1f} + engines read {parts['read_s']:.1f})"
    )
    base = simulate(cfg, barrier=False)
    print(HEADER)
    print(line("the layout", base))
    rate = base.rollouts_per_hour
    doubled = {
        "2x engines": dataclasses.replace(cfg, engine_slots=cfg.engine_slots * 2),
        "2x env servers": dataclasses.replace(cfg, env_slots=cfg.env_slots * 2),
        "2x trainer GPUs": dataclasses.replace(cfg, train_step_s=cfg.train_step_s / 2),
        "weight sync 2x faster": dataclasses.replace(cfg, weight_sync_s=cfg.weight_sync_s / 2),
        "2x rollouts in flight": dataclasses.replace(cfg, workers=cfg.workers * 2),
        "2x max staleness": dataclasses.replace(cfg, max_staleness=cfg.max_staleness * 2),
    }
    gains = {}
    for name, c in doubled.items():
        r = simulate(c, barrier=False)
        gains[name] = r.rollouts_per_hour / rate
        print(line(name, r, rate))
    machines = {
        "engines": "2x engines",
        "env servers": "2x env servers",
        "trainer": "2x trainer GPUs",
        "weight sync": "weight sync 2x faster",
    }
    first = max(machines, key=lambda m: gains[machines[m]])
    print(
        f"saturates first: {first} ({gains[machines[first]]:.2f}x from doubling it); "
        f"rollouts dropped as stale: {base.groups_dropped_stale * cfg.group_size / cfg.rollouts:.0%} "
        f"(simulated in {time.perf_counter() - t0:.0f} s)"
    )


if __name__ == "__main__":
    main()
