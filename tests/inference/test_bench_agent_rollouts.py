"""bench/agent_rollouts.py runs end to end on the tiny model and ends with its ratios."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "agent_rollouts.py"


async def test_agent_rollouts_bench_prints_ratios_last(capsys):
    spec = importlib.util.spec_from_file_location("bench_agent_rollouts", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up while defining them
    spec.loader.exec_module(bench)
    argv = ["--model", "tiny", "--quick", "--max-tokens", "3", "--tool-tokens", "20,60"]
    assert await bench.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "$ python bench/agent_rollouts.py " + " ".join(argv)
    rows = {line.split("|")[0].strip(): line for line in lines if "|" in line}
    assert {"reuse", "reuse-bf16", "no-reuse", "generate"} <= rows.keys()
    assert "llama.cpp: skipped" in "\n".join(lines)  # tiny has no GGUF file
    assert "llama-server: skipped" in "\n".join(lines)
    assert re.fullmatch(
        r"reuse/reuse-bf16 \d+\.\d\dx  reuse/no-reuse \d+\.\d\dx  reuse/generate \d+\.\d\dx",
        lines[-1],
    )
