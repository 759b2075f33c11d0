"""How long a small embedding request waits behind the largest ones, and what one re-rank of
the longest allowed texts costs in memory (issue 44, point 4).

``cheetah serve``'s embedding route (``inference/embeddings_api.py``) runs the model in
turns of ``TURN_TEXTS`` texts of one request. Here ``--clients`` requests of the largest
allowed size (``serve_max_inputs`` texts sharing ``serve_max_request_chars``) start
together, and once the model is busy one request of a single short text follows; its
latency is printed for turns as shipped and for whole-request turns (what the route did
before: ``TURN_TEXTS`` set to ``serve_max_inputs``), in the same run on the same machine.
The app runs in this process behind ``httpx.ASGITransport`` (no sockets; the model runs in
worker threads, as when served). Then the peak resident memory of this process after one
re-rank of a ``serve_max_input_chars`` query and document (before the fix, the tokenizer
alone took over 3 GB for that pair and the process was killed).

    python bench/serve_fairness.py [--clients 3] [--embedder default]

Two runs on a shared 2-core CPU VM (other work on it, load 1-5; issue 44): the small
request waited 22.1 s and 48.1 s behind whole requests, 1.0 s and 2.7 s with turns of 16;
the three large requests took 23.1 -> 31.2 s and 49.1 -> 56.0 s in all (smaller batches,
and noise); the 100k/100k re-rank added nothing to the peak RSS (954 MB with both models).

Left out: the re-rank route's own wait (it takes turns the same way, through ``in_turns``)
and many small clients (each waits for one turn of each request ahead of it).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

import httpx

import cheetah.inference.embeddings_api as api
from cheetah.inference.server import create_app
from cheetah.limits import ServerLimits
from cheetah.search.embedder import load_embedder
from cheetah.search.rerank import load_reranker

TOKEN = "b" * 32


async def small_request_wait(app, clients: int, limits: ServerLimits) -> tuple[float, float]:
    """Seconds the small request took, and seconds the large ones took in all."""
    n = limits.serve_max_inputs
    text = ("def f(x):\n    return x  # " * 200)[: limits.serve_max_request_chars // n]
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers=headers, timeout=3600
    ) as c:
        t0 = time.perf_counter()
        large = [
            asyncio.create_task(c.post("/v1/embeddings", json={"input": [text] * n}))
            for _ in range(clients)
        ]
        await asyncio.sleep(1.0)  # every large request is parsed and the model is busy
        t1 = time.perf_counter()
        r = await c.post("/v1/embeddings", json={"input": ["where is the config parsed?"]})
        waited = time.perf_counter() - t1
        assert r.status_code == 200, r.text
        for task in large:
            assert (await task).status_code == 200
        return waited, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=3, help="largest requests ahead")
    ap.add_argument("--embedder", default="default")
    args = ap.parse_args()
    limits = ServerLimits()
    embedder = load_embedder(args.embedder)
    shipped = api.TURN_TEXTS
    for name, turn in (("whole requests (before)", limits.serve_max_inputs), ("turns", shipped)):
        api.TURN_TEXTS = turn
        app = create_app(None, "none", embedder=embedder, token=TOKEN, limits=limits)  # its loop
        waited, total = asyncio.run(small_request_wait(app, args.clients, limits))
        print(f"{name:>24}: TURN_TEXTS={turn:>3}  small request waited {waited:6.2f} s  "
              f"({args.clients} large ones: {total:6.1f} s)", flush=True)  # fmt: skip
    api.TURN_TEXTS = shipped

    reranker = load_reranker("default")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    long = " ".join(f"word{i % 997}" for i in range(20_000))[: limits.serve_max_input_chars]
    t = time.perf_counter()
    reranker.score(long, [long])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"re-rank of a {len(long)}-character query and document: {time.perf_counter() - t:.2f} s, "
          f"peak RSS {before} MB before, {after} MB after")  # fmt: skip


if __name__ == "__main__":
    main()
