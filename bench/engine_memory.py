"""Engine memory under an agent-like load: the process's RSS with and without heap trims.

    python bench/engine_memory.py                 # default model, 32 agents x 3 turns
    python bench/engine_memory.py --agents 8 --model tiny

Each configuration runs in a fresh process (RSS is per process): ``--agents`` agents at once,
each a few turns whose prompts are the harness's real system prompt, a query and, from the
second turn on, the previous reply plus a tool result of random length (seeded), so the
engine admits, grows and drops rows of very different widths, as in a held-out stage.
Reported per configuration: peak RSS (``ru_maxrss``), RSS once every agent is done, the
batch's largest KV (rows x columns) and the wall time. "trim" is the engine as shipped
(freed heap pages returned to the OS every ``TRIM_EVERY_S`` after the batch changes);
"no trim" sets ``TRIM_EVERY_S`` to infinity, which is how the engine ran before.

Left out: a comparison with the engine before rows were compacted (not switchable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _agents(args: argparse.Namespace) -> dict:
    from cheetah.harness.loop import system_prompt
    from cheetah.inference import local
    from cheetah.inference.protocol import SamplingParams
    from cheetah.model.loading import build_tiny, load_model
    from cheetah.tools import default_tools

    if not args.trim:
        local.TRIM_EVERY_S = float("inf")
    loaded = build_tiny() if args.model == "tiny" else load_model(args.model)
    tok = loaded.tokenizer
    engine = local.LocalEngine.from_loaded(loaded, max_batch=args.max_batch)
    widest = [0]
    decode = engine._decode

    def watched() -> None:
        widest[0] = max(widest[0], len(engine._batch) * engine._batch.width)
        decode()

    engine._decode = watched
    system = tok(system_prompt([t.spec for t in default_tools().values()]))["input_ids"]
    words = tok("def f(x): return x + 1  # assert parse(line) == expected\n" * 200)["input_ids"]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)

    async def agent(i: int) -> None:
        rng = random.Random(i)
        prompt = system + words[: rng.randint(40, 400)]
        for _ in range(args.turns):
            if len(prompt) + args.max_tokens > engine.max_context:
                break  # a short-context model (tiny): the agent stops early
            out = await engine.generate(prompt, params)
            prompt = prompt + out.token_ids + words[: rng.randint(40, args.max_result)]

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(agent(i) for i in range(args.agents)))
    finally:
        engine.close()
    wall = time.perf_counter() - t0
    return {
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "end_rss_gib": _rss_kib() / 2**20,
        "widest_batch_tokens": widest[0],
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-result", type=int, default=900, help="longest tool result (tokens)")
    ap.add_argument("--child", choices=["trim", "no-trim"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.trim = args.child == "trim"
        print(json.dumps(asyncio.run(_agents(args))))
        return
    print("command: python " + shlex.join(sys.argv), flush=True)
    results = {}
    for name in ("no-trim", "trim"):
        child = [sys.executable, __file__, *sys.argv[1:], "--child", name]
        out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        r = results[name]
        print(
            f"{name:8s} peak RSS {r['peak_rss_gib']:.2f} GiB, end RSS {r['end_rss_gib']:.2f} GiB, "
            f"widest batch {r['widest_batch_tokens']} tokens, {r['wall_s']:.1f} s",
            flush=True,
        )
    a, b = results["no-trim"], results["trim"]
    print(
        f"end RSS trim/no-trim: {b['end_rss_gib'] / a['end_rss_gib']:.2f}x; "
        f"peak: {b['peak_rss_gib'] / a['peak_rss_gib']:.2f}x; "
        f"wall: {b['wall_s'] / a['wall_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
