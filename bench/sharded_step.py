"""The sharded trainer against one process: step time and memory per rank, in the same run.

For each world size (1, then ``--world``), that many processes (gloo on CPU, the cores split
between them) load the policy, shard it with FSDP2 when there are several (``rl/sharding.py``;
the ``TrainerGroup`` ranks run exactly this), and take ``--steps`` timed RL steps (after one
warm-up step) on the same synthetic batch, each rank on its share. Reported per rank: the
median step time, the bytes of parameters, gradients and optimizer state the rank holds (its
shards, counted from the tensors), and the process's peak resident memory.

    python bench/sharded_step.py [--model default] [--world 2] [--steps 3] [--samples 4]
                                 [--tokens 256]

On one CPU machine the ranks share the same cores, so the figure to read is memory per rank;
the time ratio says what the sharding costs in communication and smaller per-rank GEMMs.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import statistics
import time

import torch
import torch.multiprocessing as mp


def batch(samples: int, tokens: int, vocab: int) -> list:
    from cheetah.rl.data import Sample

    rng = random.Random(0)
    out = []
    for i in range(samples):
        n = tokens - rng.randint(0, tokens // 8)
        ids = [rng.randint(5, vocab - 1) for _ in range(n)]
        prompt = n // 3
        mask = [0] * prompt + [1] * (n - prompt)
        behaviour = [0.0] * prompt + [-rng.uniform(1, 6) for _ in range(n - prompt)]
        out.append(Sample(ids, mask, behaviour, advantage=1.0 if i % 2 else -1.0))
    return out


def local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def rank_main(rank: int, world: int, port: int, args: argparse.Namespace, queue) -> None:
    import torch.distributed as dist

    from cheetah.model.loading import load_policy
    from cheetah.rl.config import TrainConfig
    from cheetah.rl.sharding import shard_model, split_for_rank
    from cheetah.rl.trainer import Trainer

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        loaded = load_policy(args.model)
        model = shard_model(loaded.model) if world > 1 else loaded.model
        trainer = Trainer(model, loaded.tokenizer, TrainConfig(lr=1e-6))
        mine = split_for_rank(batch(args.samples, args.tokens, len(loaded.tokenizer)), rank, world)
        times = []
        for i in range(args.steps + 1):
            t0 = time.perf_counter()
            trainer.rl_step(mine)
            if i:  # the first step allocates the optimizer state: a warm-up
                times.append(time.perf_counter() - t0)
        params = list(model.parameters())
        opt_state = [v for s in trainer.opt.state.values() for v in s.values() if v.dim() > 0]
        queue.put(
            {
                "rank": rank,
                "step_s": statistics.median(times),
                "params_mb": local_bytes(params) / 2**20,
                "grads_mb": local_bytes(params) / 2**20,  # one gradient per parameter in a step
                "optimizer_mb": local_bytes(opt_state) / 2**20,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    finally:
        if world > 1:
            dist.destroy_process_group()


def run(world: int, args: argparse.Namespace) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=rank_main, args=(r, world, port, args, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    return sorted(results, key=lambda r: r["rank"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="default, tiny or a HF directory")
    ap.add_argument("--world", type=int, default=2, help="ranks of the sharded run")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up)")
    ap.add_argument("--samples", type=int, default=4, help="samples per step (all ranks)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per sample (about)")
    args = ap.parse_args()
    print(f"{args.model}: {args.samples} samples x ~{args.tokens} tokens, {args.steps} steps")
    rows = {w: run(w, args) for w in (1, args.world)}
    print(f"{'world':>5} {'rank':>4} {'step s':>7} {'params MB':>9} {'grads MB':>8} "
          f"{'optim MB':>8} {'peak RSS MB':>11}")  # fmt: skip
    for w, ranks in rows.items():
        for r in ranks:
            print(
                f"{w:>5} {r['rank']:>4} {r['step_s']:>7.2f} {r['params_mb']:>9.0f} "
                f"{r['grads_mb']:>8.0f} {r['optimizer_mb']:>8.0f} {r['peak_rss_mb']:>11.0f}"
            )
    one, many = rows[1][0], rows[args.world]

    def state(r: dict) -> float:
        return r["params_mb"] + r["grads_mb"] + r["optimizer_mb"]

    print(
        f"sharded/one-process: step time {max(r['step_s'] for r in many) / one['step_s']:.2f}x  "
        f"training state per rank {max(state(r) for r in many) / state(one):.2f}x  "
        f"peak RSS per rank {max(r['peak_rss_mb'] for r in many) / one['peak_rss_mb']:.2f}x"
    )


if __name__ == "__main__":
    main()
