"""How the engine's decode step depends on its threads and on how OpenMP threads wait, alone
and beside other busy processes (a training run's engine shares the cores with the trainer,
rollout workers and sandboxed test runs).

For each of: torch threads 1 or 2 (or `--threads`), `OMP_WAIT_POLICY` passive or active
(OpenMP's spinning default), and 0 or `--busy` busy processes beside it, a fresh process
prefills `--rows` prompts of ~1,250 tokens into one ``KVBatch`` and times `--steps` decode
steps (median and min, ms). The policy must be set before torch loads, hence a process
per setting. Prints each setting's step time and its ratio to 1 thread, passive.

    python bench/engine_threads.py              # the default model, 16 rows and 1 row
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, statistics, sys, time, torch
rows, steps = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from cheetah.inference.batch import KVBatch
from cheetah.model.loading import load_model
model = load_model("default").model.eval()
gen = torch.Generator().manual_seed(0)
prompts = [torch.randint(100, 40000, (1200 + 7 * i,), generator=gen).tolist() for i in range(rows)]
with torch.inference_mode():
    batch = KVBatch(model, 0)
    batch.prefill(list(range(rows)), prompts)
    for _ in range(2):
        batch.decode([5] * rows)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        batch.decode([5] * rows)
        times.append(time.perf_counter() - t0)
print(json.dumps({"median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times),
                  "threads": torch.get_num_threads()}))
"""

BUSY = "while True: pass"


def run(rows: int, steps: int, threads: int, policy: str) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "OMP_NUM_THREADS": str(threads)}
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(rows), str(steps), root],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[16, 1], help="batch rows")
    p.add_argument("--steps", type=int, default=15, help="timed decode steps per setting")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--busy", type=int, default=1, help="busy processes in the loaded runs")
    a = p.parse_args()
    print(f"$ python bench/engine_threads.py  (cpus: {os.cpu_count()}, load {os.getloadavg()})")
    for busy in (0, a.busy):
        loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            for rows in a.rows:
                base = None
                for threads in a.threads:
                    for policy in ("passive", "active"):
                        r = run(rows, a.steps, threads, policy)
                        base = base or r["median_ms"]
                        print(
                            f"busy {busy}  rows {rows:>2}  threads {threads}  {policy:<7}  "
                            f"median {r['median_ms']:7.1f} ms  min {r['min_ms']:7.1f} ms  "
                            f"speed {base / r['median_ms']:.2f}x that of 1 thread, passive",
                            flush=True,
                        )
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()


if __name__ == "__main__":
    main()
