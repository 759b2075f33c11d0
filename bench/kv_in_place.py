"""The engine's batch with rows dropped and merged in place against copying the whole batch.

An agent's rollouts keep the engine's batch in flux: a row finishes its turn every few dozen
tokens and comes back (its next turn) once the tool results are in. ``KVBatch`` drops and
merges rows in place where it can (``cheetah/inference/batch.py``); with ``in_place=False``
every drop and every merge copies all running rows' KV into fresh buffers (the engine before
the change). This runs the same ``cheetah eval`` (greedy, in-process engine, isolated
sandboxes) in both modes, alternating, ``--repeats`` times each, and prints per mode the
median wall time and the seconds inside ``KVBatch``'s decode, prefill (which includes the
merge), merge and drop (``keep``) calls, the ratio of the medians, and per run how many
tasks were graded differently from the first copying run (the logits are the model's in
both modes, ``tests/inference/test_batch.py``; but which rows share a decode step depends on
timing, so near-ties may flip between any two runs).

    python bench/kv_in_place.py --model runs/quickstart/checkpoints/sft   # 16 held-out tasks
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import atexit, json, sys, time, collections
sys.path.insert(0, sys.argv[1])
from cheetah.inference import batch as B
if sys.argv[2] == "copy":
    B.KVBatch.__init__.__defaults__ = (False,)
spent, calls = collections.defaultdict(float), collections.Counter()
def timed(name):
    inner = getattr(B.KVBatch, name)
    def call(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return inner(self, *a, **k)
        finally:
            spent[name] += time.perf_counter() - t0
            calls[name] += 1
    setattr(B.KVBatch, name, call)
for name in ("decode", "prefill", "_merge", "keep"):
    timed(name)
atexit.register(lambda: print("KV " + json.dumps({"spent": spent, "calls": calls}), flush=True))
from cheetah.cli import main
sys.exit(main(sys.argv[3:]))
"""


def run(mode: str, args: argparse.Namespace, out: Path) -> dict:
    cmd = [
        sys.executable, "-c", CHILD, str(ROOT), mode, "eval",
        "--tasks", args.tasks, "--tier", args.tier, "--split", "heldout",
        "--limit", str(args.limit), "--model", args.model, "--concurrency", str(args.limit),
        "--max-new-tokens", "128", "--max-turns", "3", "--out", str(out),
    ]  # fmt: skip
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}  # as `cheetah` sets it, before torch
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    kv = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("KV "))[3:])
    report = json.loads((out / "report.json").read_text())
    graded = [(s["task_id"], s["correct"]) for s in report["samples"]]
    errors = sum(1 for s in report["samples"] if s.get("error"))
    return {"wall_s": report["wall_s"], "graded": graded, "errors": errors, **kv}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        required=True,
        help="a trained checkpoint (what `cheetah eval --model` takes): the base model answers "
        "in one turn, so its rows never come back and there is little to compare",
    )
    p.add_argument("--tasks", default="curriculum")
    p.add_argument("--tier", default="line")
    p.add_argument("--limit", type=int, default=16, help="held-out tasks, all run at once")
    p.add_argument("--repeats", type=int, default=2, help="runs per mode, alternating")
    a = p.parse_args()
    print(f"$ python bench/kv_in_place.py --model {a.model} --limit {a.limit} "
          f"--repeats {a.repeats}  (cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")  # fmt: skip
    runs: dict[str, list[dict]] = {"copy": [], "in place": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for mode in runs:
                r = run("copy" if mode == "copy" else "in_place", a, Path(tmp) / f"{i}-{mode}")
                runs[mode].append(r)
                solved = sum(c for _, c in r["graded"])
                print(f"  run {i + 1} {mode:<8} wall {r['wall_s']:6.1f} s  solved {solved}/{a.limit}  "
                      f"episodes with an error {r['errors']}",
                      flush=True)  # fmt: skip
    med = {}
    for mode, rs in runs.items():
        med[mode] = statistics.median(r["wall_s"] for r in rs)
        parts = "  ".join(
            f"{name} {statistics.median(r['spent'].get(name, 0.0) for r in rs):5.1f} s"
            f" ({rs[0]['calls'].get(name, 0)} calls)"
            for name in ("decode", "prefill", "_merge", "keep")
        )
        solved = sum(c for _, c in rs[0]["graded"])
        print(f"{mode:<8}  wall median {med[mode]:6.1f} s  solved {solved}/{a.limit}  {parts}")
    first = runs["copy"][0]["graded"]
    differ = [
        sum(x != y for x, y in zip(r["graded"], first, strict=True))
        for rs in runs.values()
        for r in rs
    ]
    print(f"in place / copy wall: {med['in place'] / med['copy']:.2f}x; tasks graded differently "
          f"from the first copy run, per run: {differ}")  # fmt: skip
    print(
        "(greedy, but which rows share a batch step depends on timing, and a batch's padding "
        "changes float sums: near-ties may flip in either mode)"
    )


if __name__ == "__main__":
    main()
