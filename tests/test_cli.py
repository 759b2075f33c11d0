"""The CLI as a user runs it: real subprocesses, real stdin/stdout."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cheetah.harness.trajectory import Trajectory
from tests.conftest import FIX_SCRIPT

BIN = Path(sys.executable).parent
# Each command is a fresh process that imports torch and may load a model: on a busy machine
# that alone has taken minutes, so neither the helper's nor the test's bound is tight.
pytestmark = pytest.mark.timeout(1800)


def cheetah(*args, stdin=None, cwd=None, timeout=600):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "100"}
    return subprocess.run(
        [BIN / "cheetah", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def test_tools_run_prints_results_exactly_as_the_model_sees_them(sample_repo):
    msg = (
        'Looking.\n<tool name="grep"><pattern>def words</pattern></tool>\n'
        '<tool name="read_file"><path>textkit/tokenize.py</path><end_line>3</end_line></tool>\n'
        '<tool name="read_file"><path>../etc</path></tool>'
    )
    r = cheetah("tools", "run", "--repo", sample_repo, stdin=msg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        '<tool_result name="grep" index="1">\n'
        "textkit/tokenize.py:8: def words(text: str) -> list[str]:\n"
        "</tool_result>\n"
        '<tool_result name="read_file" index="2">\n'
        '     1\t"""Splitting text into words."""\n'
        "     2\t\n"
        "     3\timport re\n"
        "</tool_result>\n"
        '<tool_result name="read_file" index="3" status="error">\n'
        "Error: path '../etc' leads outside the workspace\n"
        "</tool_result>\n"
    )


def test_tools_run_without_calls_and_bad_repo(tmp_path):
    r = cheetah("tools", "run", "--repo", tmp_path, stdin="just prose")
    assert r.returncode == 0 and r.stdout == "" and "no <tool> calls" in r.stderr
    r = cheetah("tools", "run", "--repo", tmp_path / "missing", stdin="")
    assert r.returncode == 2 and "is not a directory" in r.stderr


def test_agent_fixes_the_sample_repo_end_to_end(sample_repo, tmp_path):
    out = tmp_path / "traj.json"
    r = cheetah(
        "agent",
        "The tests fail; fix the bug.",
        "--repo",
        sample_repo,
        "--model",
        f"scripted:{FIX_SCRIPT}",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert "turn 3" in r.stdout and "+    return ranked[:n]" in r.stdout
    assert "finished" in r.stdout
    traj = Trajectory.load(out)
    assert traj.stop_reason == "finished" and traj.summary()["tool_errors"] == 0
    tests = subprocess.run([sys.executable, "-m", "pytest"], cwd=sample_repo, capture_output=True)
    assert tests.returncode == 0


def test_agent_whose_policy_fails_keeps_the_turns_and_exits_1(sample_repo, tmp_path):
    script = tmp_path / "short.json"
    script.write_text(json.dumps(['<tool name="list_dir"></tool>']))  # nothing after turn 1
    out = tmp_path / "traj.json"
    r = cheetah("agent", "q", "--repo", sample_repo, "--model", f"scripted:{script}", "--out", out)
    assert r.returncode == 1 and "stopped by an error" in r.stderr and "no message left" in r.stderr
    traj = Trajectory.load(out)
    assert traj.stop_reason == "error" and [c.name for c in traj.calls] == ["list_dir"]


def test_agent_bad_model_and_script(tmp_path):
    r = cheetah("agent", "q", "--repo", tmp_path, "--model", "gpt-who")
    assert r.returncode == 2 and "unknown model 'gpt-who'" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = cheetah("agent", "q", "--repo", tmp_path, "--model", f"scripted:{bad}")
    assert r.returncode == 2 and "is not valid JSON" in r.stderr
    bad.write_text(json.dumps({"messages": [1, 2]}))
    r = cheetah("agent", "q", "--repo", tmp_path, "--model", f"scripted:{bad}")
    assert r.returncode == 2 and "list of strings" in r.stderr


def test_help_and_tools_list():
    r = cheetah("--help")
    assert r.returncode == 0 and "agent" in r.stdout and "tools" in r.stdout
    r = cheetah("agent", "--help")
    assert "--max-turns" in r.stdout and "scripted:FILE" in r.stdout
    r = cheetah("tools", "list")
    assert r.returncode == 0 and "## edit_file" in r.stdout


def test_agent_with_an_in_process_model_records_engine_tokens(sample_repo, tmp_path):
    out = tmp_path / "t.json"
    r = cheetah(
        "agent",
        "Fix it.",
        "--repo",
        sample_repo,
        "--model",
        "tiny",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "8",
        "--out",
        out,
    )
    traj = Trajectory.load(out)
    turn = traj.turns[0]
    # a random model's 8 tokens are rarely a finished answer: a cut reply is a limit (exit 3)
    assert r.returncode == {"finished": 0, "limit": 3}[traj.stop_reason], r.stderr
    if turn.finish_reason == "length" and not turn.calls:
        assert "max_new_tokens=8" in traj.stop_detail and "stopped at a limit" in r.stderr
    assert len(turn.token_ids) == len(turn.logprobs) == turn.completion_tokens <= 8
    assert turn.policy_version == 0 and traj.policy == "engine:tiny"
    r = cheetah("agent", "q", "--repo", sample_repo, "--model", str(tmp_path / "no-model"))
    assert r.returncode == 2 and "unknown model" in r.stderr


def test_agent_with_the_default_model_exits_cleanly(sample_repo):
    """The engine's step thread is stopped before exit: with a real model its torch threads
    once made the process abort at interpreter exit (SIGABRT, status 134) after a good run."""
    r = cheetah(
        "agent", "Say hi.", "--repo", sample_repo, "--model", "default",
        "--max-turns", "1", "--max-new-tokens", "8", "--quiet", timeout=900,
    )  # fmt: skip
    assert r.returncode in (0, 3), (r.returncode, r.stderr[-2000:])  # 3: cut at 8 tokens
    assert "terminate called" not in r.stderr


def test_limit_flags_come_from_the_typed_limits(tmp_path):
    from cheetah.harness.loop import AgentLimits

    r = cheetah("agent", "--help")
    assert f"(default: {AgentLimits().max_turns})" in r.stdout and "--max-wall-s" in r.stdout
    r = cheetah(
        "agent", "q", "--repo", tmp_path, "--model", f"scripted:{FIX_SCRIPT}", "--max-turns", "0"
    )
    assert (
        r.returncode == 2 and "--max-turns: Input should be greater than or equal to 1" in r.stderr
    )
    r = cheetah("eval", "--help")
    assert "--max-tokens" in r.stdout and f"(default: {AgentLimits().max_tokens})" in r.stdout
    r = cheetah("eval", "--tasks", "benchmark", "--model", "oracle", "--out", tmp_path / "o",
                "--without-tool", "grap")  # fmt: skip
    assert r.returncode == 2 and "--without-tool" in r.stderr and "'grap'" in r.stderr, r.stderr
    assert "codebase_search" in r.stderr  # the tools there are, named


def _without_ml(*argv: str) -> subprocess.CompletedProcess:
    """``cheetah ARGV`` in a process where the `ml` extra's packages cannot be imported."""
    code = (
        "import sys\n"
        "for m in ('torch', 'numpy', 'transformers', 'ray', 'matplotlib'): sys.modules[m] = None\n"
        "from cheetah.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)


def test_the_core_runs_without_the_ml_extra_and_names_it_when_needed(tmp_path):

    assert _without_ml("--version").stdout.startswith("cheetah ")
    tasks = "benchmark"  # the bundled set, by name
    r = _without_ml("eval", "--tasks", tasks, "--model", "oracle", "--limit", "1",
                    "--sandbox", "local", "--out", str(tmp_path / "report"))  # fmt: skip
    assert r.returncode == 0 and "pass@1 1.000" in r.stdout, r.stderr[-2000:]
    r = _without_ml("train", "--set", f"run.out_dir={tmp_path}")
    assert r.returncode == 2 and "install the 'ml' extra" in r.stderr, r.stderr[-2000:]


def test_doctor_reports_the_machine_with_and_without_torch():
    r = cheetah("doctor", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    keys = {"cpu", "matmul", "precision", "torch", "gpus", "sandbox", "disk_free_gb", "memory",
            "extras", "llama_cpp", "problems"}  # fmt: skip
    assert keys <= report.keys()
    assert report["precision"]["train"]["cpu"]["chosen"] in ("fp32", "bf16")
    assert report["matmul"]["fp32_ms"] > 0 and report["torch"]["threads"] >= 1
    assert all({"what", "fix"} == p.keys() for p in report["problems"])
    text = cheetah("doctor", timeout=300).stdout
    assert "precision  training on cpu (auto)" in text and "sandbox" in text
    bare = json.loads(_without_ml("doctor", "--json").stdout)
    assert bare["torch"] is None and any("no torch" in p["what"] for p in bare["problems"])


def test_doctor_names_the_fix_for_what_is_missing():
    from cheetah.cli.doctor import EXTRAS, problems

    report = {
        "sandbox": {"bwrap": None, "isolated": False, "error": None, "cgroup_v1_limits": []},
        "torch": {"threads": 2},
        "precision": {"train": {"cpu": {"chosen": "fp32", "reason": "bf16 takes 38x"}}},
        "extras": {group: dict.fromkeys(names, True) for group, names in EXTRAS.items()},
        "llama_cpp": {"llama_server": "/usr/bin/llama-server", "llama_cpp_python": False},
        "disk_free_gb": {"/tmp": 100.0},
        "memory": {"total_gb": 16.0, "available_gb": 12.0},
    }
    fixes = {p["fix"] for p in problems(report)}
    assert "apt-get install bubblewrap" in fixes
    assert any('training runs in fp32 (train.precision = "auto")' in f for f in fixes)
    assert len(fixes) == 2
