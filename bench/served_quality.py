"""What serving a trained checkpoint through llama.cpp costs in quality: the same checkpoint
on the same held-out tasks, run by cheetah's engine (fp32, in process) and by llama.cpp on
its GGUF export (`cheetah export --gguf`, each `--gguf-type` asked for).

Exports the GGUF files into `--out`, runs `cheetah eval` once per condition (greedy, one
sample a task; llama.cpp through `--model llama.cpp:FILE`, llama-server when it is on PATH)
and prints the paired table (`paired_eval.py`: pass rate, exact McNemar, turns) and each
condition's wall time. Needs llama.cpp (`make bench-llama`). `--reuse` compares the reports
already in `--out`.

    PATH=/path/to/llama.cpp/build/bin:$PATH python bench/served_quality.py \
        --model /tmp/cheetah-demo/quickstart/checkpoints/sft --out /tmp/served
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired_eval import load, print_paired, run_eval


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a checkpoint directory (HF, Llama family)")
    p.add_argument(
        "--gguf-type", action="append", choices=["f32", "f16", "q8_0"],
        help="GGUF storage to serve (repeatable; default q8_0)",
    )  # fmt: skip
    p.add_argument("--tasks", default="curriculum")
    p.add_argument("--split", default="heldout")
    p.add_argument("--tier", default="line")
    p.add_argument("--limit", type=int, default=64, help="first N tasks (0: all)")
    p.add_argument("--max-turns", type=int, default=3, help="the quickstart's")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reuse", action="store_true", help="compare the reports in --out as they are")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    models = {"cheetah engine, fp32": a.model}
    for kind in a.gguf_type or ["q8_0"]:
        gguf = a.out / f"model-{kind}.gguf"
        if not gguf.is_file():
            cli = str(Path(sys.executable).parent / "cheetah")
            export = [cli, "export", "--gguf", a.model, "--gguf-type", kind, "--out", str(gguf)]
            subprocess.run(export, check=True)
        models[f"llama.cpp, GGUF {kind}"] = f"llama.cpp:{gguf}"
    seconds = {}
    for i, (name, model) in enumerate(models.items()):
        out = a.out / f"cond{i}"
        if not (a.reuse and (out / "report.json").is_file()):
            t0 = time.perf_counter()
            run_eval(
                model, out, tasks=a.tasks, split=a.split, tier=a.tier, max_turns=a.max_turns,
                max_new_tokens=a.max_new_tokens, concurrency=a.concurrency, limit=a.limit,
            )  # fmt: skip
            seconds[name] = time.perf_counter() - t0
    print_paired(
        {name: load(a.out / f"cond{i}") for i, name in enumerate(models)},
        f"{a.tier}, {a.split}, checkpoint {a.model}",
    )
    for name, s in seconds.items():
        print(f"wall time, {name}: {s:.0f} s")


if __name__ == "__main__":
    main()
