"""Per-call overhead of an env server against a baseline checkout, calls interleaved.

Starts two ``cheetah env serve`` processes on this machine, one from this checkout and one
from ``--baseline`` (a checkout of an earlier commit, e.g. ``git worktree add /tmp/base
COMMIT``; its package is put first on ``PYTHONPATH``), each on its own base dir, uploads
the sample repo to both, and sends the same one-call batch (``run_terminal true``) to
each in turn, alternating which goes first, so the machine's noise falls on both alike.
Prints medians, p10/p90 and the ratio (this / baseline).

    python bench/sandbox_ab.py --baseline /tmp/base [--reps 300]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from cheetah.core.ports import free_port
from cheetah.harness.protocol import parse_message, render_call
from cheetah.sandbox.client import EnvClient
from cheetah.tasks.checkout import pack_tree

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def start(name: str, pythonpath: Path | None, tmp: Path) -> tuple[subprocess.Popen, str, str]:
    token, port = secrets.token_hex(16), free_port()
    (tmp / f"token-{name}").write_text(token)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env["CHEETAH_SANDBOX_DIR"] = f"/tmp/cheetah-ab-{name}"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    argv = [BIN / "cheetah", "env", "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--token-file", str(tmp / f"token-{name}")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.get(f"{url}/health", timeout=1)
            return proc, url, token
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"the {name} env server did not start")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="checkout of the baseline")
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    data = pack_tree(ROOT / "cheetah" / "data" / "sample_repo")
    sha = hashlib.sha256(data).hexdigest()
    calls = parse_message(render_call("run_terminal", {"command": "true"}))
    with tempfile.TemporaryDirectory() as tmp:
        servers = {"this": start("this", None, Path(tmp))}
        servers["baseline"] = start("baseline", args.baseline.resolve(), Path(tmp))
        clients = {k: EnvClient(url, token) for k, (_, url, token) in servers.items()}
        try:
            sids = {}
            for k, client in clients.items():
                if not await client.has_snapshot(sha):
                    await client.put_snapshot(sha, data)
                sids[k] = (await client.create_session(f"upload:{sha}")).session_id
            times: dict[str, list[float]] = {k: [] for k in clients}
            for i in range(args.reps):
                for k in ("this", "baseline") if i % 2 else ("baseline", "this"):
                    t0 = time.perf_counter()
                    [r] = await clients[k].run_tools(sids[k], calls)
                    times[k].append(time.perf_counter() - t0)
                    assert not r.is_error, r.output
            for k, xs in times.items():
                xs.sort()
                print(
                    f"{k:9s} run_terminal true  median {statistics.median(xs) * 1000:7.2f} ms"
                    f"  p10 {xs[len(xs) // 10] * 1000:7.2f}  p90 {xs[9 * len(xs) // 10] * 1000:7.2f}"
                )
            ratio = statistics.median(times["this"]) / statistics.median(times["baseline"])
            print(f"this / baseline (medians): {ratio:.3f}")
        finally:
            for client in clients.values():
                await client.aclose()
            for proc, *_ in servers.values():
                proc.terminate()
                proc.wait(timeout=60)


if __name__ == "__main__":
    asyncio.run(main())
