"""bench/engine.py runs end to end on the tiny model and prints its table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


async def test_engine_bench_prints_a_table_with_ratios(capsys):
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = [
        "--model",
        "tiny",
        "--max-tokens",
        "4",
        "--concurrency",
        "1,3",
        "--prefix-requests",
        "3",
    ]
    assert await bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "$ python bench/engine.py --model tiny --max-tokens 4 --concurrency 1,3" in out
    rows = [line for line in out.splitlines() if line.strip().startswith(("1 |", "3 |"))]
    assert len(rows) == 2 and all(line.rstrip().endswith("x") for line in rows)
    reuse = [line for line in out.splitlines() if line.strip().startswith(("cold |", "warm |"))]
    assert len(reuse) == 2 and all(line.rstrip().endswith("%") for line in reuse)
    assert "identical with and without the cache: 6/6" in out
