import json

import pytest

from cheetah.harness.policy import ScriptedPolicy
from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.evaluate import EvalConfig, run_eval
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.oracle import OraclePolicy
from cheetah.tasks.report import write_report
from cheetah.tasks.session import local_sessions

from .conftest import bug_task


def noop(task):
    return ScriptedPolicy(["Nothing to do."])


async def test_oracle_scores_one_and_noop_scores_zero(calc_repo, tmp_path):
    tasks = [bug_task(calc_repo), bug_task(calc_repo, id="calc-add-2")]
    config = EvalConfig(samples=1, concurrency=2)
    good = await run_eval(
        tasks, OraclePolicy, local_sessions("local"), config, out_dir=tmp_path / "o"
    )
    assert good.summary["pass@1"] == 1.0
    assert good.summary["conventions"] == 1.0
    assert good.summary["edits"] == 1.0
    assert good.summary["explore_before_edit"] == 1.0
    assert all(s.error is None for s in good.samples)
    saved = json.loads((tmp_path / "o" / "trajectories" / "calc-add.0.json").read_text())
    assert saved["reward"] == pytest.approx(1.0) and saved["grade"]["correct"] is True

    bad = await run_eval(tasks, noop, local_sessions("local"), EvalConfig(samples=2))
    assert bad.summary["pass@1"] == 0.0 and bad.summary["pass@2"] == 0.0
    assert bad.summary["samples"] == 4


async def test_per_task_errors_do_not_stop_the_run(calc_repo, tmp_path):
    tasks = [
        bug_task(calc_repo, id="ok"),
        bug_task(calc_repo, id="no-repo", snapshot={"dir": str(tmp_path / "missing")}),
        bug_task(calc_repo, id="no-commit", snapshot={"git": str(calc_repo), "commit": "f" * 40}),
        bug_task(calc_repo, id="bad-setup", setup="echo installing; exit 3"),
        bug_task(
            calc_repo,
            id="hang",
            pass_to_pass=[{"command": "sleep 30", "name": "hang", "timeout_s": 0.5}],
        ),
    ]
    # The "hang" check has its own 0.5 s (against a 30 s sleep); the others' limit only guards
    # a hang: 30 s was a few times what a pytest run takes on a busy 2-core machine.
    config = EvalConfig(samples=1, concurrency=2, grader=GraderConfig(check_timeout_s=120))
    report = await run_eval(tasks, OraclePolicy, local_sessions("local"), config)
    by_id = {t.task_id: t for t in report.tasks}
    assert by_id["ok"].pass_at_1 == 1.0 and not by_id["ok"].errors
    assert "snapshot directory" in by_id["no-repo"].errors[0]
    assert "git" in by_id["no-commit"].errors[0]
    assert (
        "setup command 'echo installing; exit 3' failed (exit status 3)"
        in by_id["bad-setup"].errors[0]
    )
    assert "installing" in by_id["bad-setup"].errors[0]
    [hang] = [s for s in report.samples if s.task_id == "hang"]
    assert not hang.correct and hang.failed_checks == ["hang"]
    assert report.summary["errors"] == 3
    assert report.summary["pass@1"] == pytest.approx(1 / 5)

    paths = write_report(report, tmp_path / "r")
    md = paths["markdown"].read_text()
    assert "| no-repo |" in md and "snapshot directory" in md
    assert json.loads(paths["json"].read_text())["summary"]["errors"] == 3


async def test_report_plot_when_matplotlib_is_installed(calc_repo, tmp_path):
    pytest.importorskip("matplotlib")
    report = await run_eval([bug_task(calc_repo)], OraclePolicy, local_sessions("local"))
    paths = write_report(report, tmp_path)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_matplotlib_skips_only_the_plot(tmp_path, monkeypatch):
    import sys

    from cheetah.tasks.evaluate import EvalReport, summarize

    tasks = [bug_task(tmp_path)]
    per_task, summary, groups = summarize(tasks, [], 1)
    report = EvalReport(
        model="m", config=EvalConfig(), summary=summary, by_group=groups, tasks=per_task
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    paths = write_report(report, tmp_path / "r")
    assert paths["plot"] is None
    assert "| calc-add | easy | train | other | 0/0 |" in paths["markdown"].read_text()


async def test_a_failing_policy_is_an_error_sample_that_keeps_its_turns(calc_repo, tmp_path):
    def short(task):  # one turn, then the script runs out: a PolicyError, not a model failure
        return ScriptedPolicy(['<tool name="list_dir"></tool>'])

    report = await run_eval(
        [bug_task(calc_repo)], short, local_sessions("local"), out_dir=tmp_path / "o"
    )
    [s] = report.samples
    assert not s.correct and s.stop_reason == "error" and "no message left" in s.error
    saved = Trajectory.load(s.trajectory)
    assert saved.stop_reason == "error" and [c.name for c in saved.calls] == ["list_dir"]


async def test_an_eval_without_a_tool_never_offers_it(calc_repo, tmp_path):
    """The codebase_search ablation: same tasks, the tool left out of the prompt and refused."""
    script = ['<tool name="codebase_search"><query>add</query></tool>', "Nothing to do."]
    config = EvalConfig(without_tools=["codebase_search"])
    report = await run_eval(
        [bug_task(calc_repo)],
        lambda task: ScriptedPolicy(list(script)),
        local_sessions("local"),
        config,
        out_dir=tmp_path / "o",
    )
    assert report.config.without_tools == ["codebase_search"]  # saved with the report
    traj = Trajectory.load(tmp_path / "o" / "trajectories" / "calc-add.0.json")
    assert "## codebase_search" not in traj.messages[0].content
    assert "## grep" in traj.messages[0].content
    call = traj.turns[0].calls[0]
    assert call.is_error and "unknown tool 'codebase_search'" in call.output
    with pytest.raises(ValueError, match=r"(?s)without_tools.*unknown tool 'grap'"):
        EvalConfig(without_tools=["grap"])
