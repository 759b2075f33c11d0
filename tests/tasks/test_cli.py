import argparse
import json

from cheetah.bundled import TASK_SETS
from cheetah.cli import eval as eval_verb
from cheetah.cli import main
from cheetah.cli import tasks as tasks_verbs

from .conftest import bug_task


def write_tasks(path, *tasks):
    path.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    return path


def test_verbs_register_on_a_parent_parser():
    parser = argparse.ArgumentParser(prog="cheetah")
    sub = parser.add_subparsers(dest="verb")
    tasks_verbs.add_commands(sub)
    eval_verb.add_commands(sub)
    args = parser.parse_args(
        ["eval", "--tasks", "t.jsonl", "--model", "oracle", "--out", "d", "--samples", "3"]
    )
    assert (args.samples, args.concurrency, args.model) == (3, 2, "oracle")
    args = parser.parse_args(["tasks", "generate", "--repo", "r", "--out", "o.jsonl"])
    assert args.max_mutants == 150 and args.sandbox == "isolated"  # fetched code: sandboxed
    args = parser.parse_args(["tasks", "validate", "t.jsonl"])
    assert args.sandbox == "isolated"
    help_text = sub.choices["eval"].format_help()
    assert "pass@k" in help_text and "--sandbox" in help_text
    assert "unsandboxed" in help_text.lower()


def test_validate_ok_and_malformed(calc_repo, tmp_path, capsys):
    good = write_tasks(tmp_path / "good.jsonl", bug_task(calc_repo))
    assert main(["tasks", "validate", str(good), "--sandbox", "local"]) == 0
    out = capsys.readouterr()
    assert "1/1 tasks valid" in out.out
    assert "validating: 1/1" in out.err  # progress as plain lines when not on a terminal
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"id": "x", "query": "q"}\n')
    assert main(["tasks", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: snapshot: Field required" in err


def test_eval_oracle_writes_reports(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    out = tmp_path / "report"
    argv = ["eval", "--tasks", str(tasks), "--model", "oracle", "--out", str(out)]
    assert main([*argv, "--sandbox", "local"]) == 0
    assert "pass@1 1.000" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["pass@1"] == 1.0
    assert (out / "report.md").read_text().startswith("# Eval: oracle")


def test_eval_bad_model_fails_fast(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    code = main(
        ["eval", "--tasks", str(tasks), "--model", "nonsense", "--out", str(tmp_path / "o")]
    )
    assert code == 2
    assert "unknown model" in capsys.readouterr().err


def test_eval_scripted_model_gets_a_fresh_script_per_sample(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    script = tmp_path / "noop.json"
    script.write_text('["Nothing to change."]')
    out = tmp_path / "report"
    argv = ["eval", "--tasks", str(tasks), "--model", f"scripted:{script}", "--out", str(out)]
    assert main([*argv, "--samples", "2", "--sandbox", "local"]) == 0
    assert "pass@1 0.000  pass@2 0.000" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert [s["stop_reason"] for s in report["samples"]] == ["finished", "finished"]


def test_env_url_without_a_token_file_is_refused_before_any_work(tmp_path, capsys):

    tasks = TASK_SETS / "benchmark.jsonl"
    argv = ["eval", "--tasks", str(tasks), "--model", "oracle", "--out", str(tmp_path / "o")]
    assert main([*argv, "--env-url", "http://127.0.0.1:9"]) == 2
    assert "--env-url needs --env-token-file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_help_texts_say_what_the_verbs_write():
    from cheetah.tasks.curriculum import TIERS

    parser = argparse.ArgumentParser(prog="cheetah")
    sub = parser.add_subparsers(dest="verb")
    tasks_verbs.add_commands(sub)
    verbs = sub.choices["tasks"]._subparsers._group_actions[0].choices
    curriculum = " ".join(verbs["curriculum"].format_help().split())
    assert "up to five tasks, one per tier" in curriculum
    assert all(f"'{tier}'" in curriculum for tier in TIERS)
    for verb in ("curriculum", "generate", "validate"):
        assert "--test-command" in verbs[verb].format_help()
    fetch = " ".join(verbs["fetch"].format_help().split())
    assert "CACHE/<sha256>/<file>" in fetch and "laid flat" in fetch
    args = parser.parse_args(["tasks", "curriculum", "--repos", "r", "--out", "o.jsonl"])
    assert args.timeout is None and args.test_command is None  # measured, found per repo
