"""``cheetah eval`` fails loudly: its exit status and what it prints when the run could not
measure anything (wrong token, server down, repos not fetched), and the flags that say
where things are (``--token-file``, ``--repos``/``--envs``). In process, local sessions."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cheetah.cli import main
from cheetah.harness.policy import Generation
from cheetah.tasks.evaluate import EvalConfig, run_eval
from cheetah.tasks.report import markdown
from cheetah.tasks.session import local_sessions

from .conftest import bug_task

TOKEN = "right-token-0123456789"


def write_tasks(path, *tasks):
    path.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    return path


@pytest.fixture
def refusing_server():
    """An OpenAI-compatible server that answers 401 to every token but ``TOKEN``; it records
    the Authorization headers it got."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _answer(self):
            seen.append(self.headers.get("Authorization", ""))
            ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            body = (
                {"object": "list", "data": [{"id": "m"}]}
                if ok
                else {"error": {"message": "invalid bearer token"}}
            )
            data = json.dumps(body).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer()

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()
    httpd.server_close()


def _argv(tasks, out, model, *more):
    return ["eval", "--tasks", str(tasks), "--model", model, "--out", str(out),
            "--sandbox", "local", *map(str, more)]  # fmt: skip


def test_a_wrong_token_errors_every_sample_and_exits_1_with_the_cause(
    calc_repo, tmp_path, capsys, refusing_server
):
    url, seen = refusing_server
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    wrong = tmp_path / "wrong.token"
    wrong.write_text("wrong-token-0123456789\n")
    assert main(_argv(tasks, tmp_path / "o", url, "--token-file", wrong, "--samples", 2)) == 1
    err = capsys.readouterr().err
    assert "every sample errored (2)" in err and "answered 401" in err, err
    assert "invalid bearer token" in err
    assert seen and set(seen) == {"Bearer wrong-token-0123456789"}  # the file's token was sent
    report = json.loads((tmp_path / "o" / "report.json").read_text())  # still written
    assert report["summary"]["errors"] == 2


def test_a_server_that_is_down_exits_1(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    assert main(_argv(tasks, tmp_path / "o", "http://127.0.0.1:9/v1")) == 1
    err = capsys.readouterr().err
    assert "every sample errored (1)" in err and "cannot reach http://127.0.0.1:9/v1" in err


def test_an_unreadable_token_file_is_bad_input(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo))
    argv = _argv(tasks, tmp_path / "o", "http://127.0.0.1:9/v1", "--token-file", tmp_path / "x")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--token-file" in err and "cannot read token file" in err
    assert not (tmp_path / "o").exists()  # nothing ran


def test_some_errored_samples_are_reported_and_the_run_still_counts(calc_repo, tmp_path, capsys):
    tasks = write_tasks(
        tmp_path / "t.jsonl",
        bug_task(calc_repo, id="ok"),
        bug_task(calc_repo, id="no-repo", snapshot={"dir": str(tmp_path / "missing")}),
    )
    assert main(_argv(tasks, tmp_path / "o", "oracle")) == 0
    out, err = capsys.readouterr()
    assert "pass@1 0.500" in out and "errors 1" in out
    assert "1 of 2 samples errored" in err and "no-repo#0: " in err


def test_an_unknown_tier_or_id_names_what_there_is(calc_repo, tmp_path, capsys):
    tasks = write_tasks(tmp_path / "t.jsonl", bug_task(calc_repo), bug_task(calc_repo, id="b"))
    assert main([*_argv(tasks, tmp_path / "o", "oracle"), "--tier", "nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "no task of tier 'nonexistent'" in err and "its tiers are: easy" in err
    assert main([*_argv(tasks, tmp_path / "o", "oracle"), "--id", "nope"]) == 2
    assert "no task with id 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _fetched(root, name="calc", version="1.0", repo=None):
    """A folder laid out as ``cheetah tasks fetch`` leaves it: the repo and fetched.json."""
    import shutil

    root.mkdir(parents=True)
    shutil.copytree(repo, root / name)
    (root / "fetched.json").write_text(json.dumps([{"name": name, "version": version}]))
    return root


def test_repos_names_where_the_fetched_repos_are(calc_repo, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHEETAH_REPOS_DIR", str(tmp_path / "nothing-here"))
    monkeypatch.setenv("CHEETAH_ENVS_DIR", str(tmp_path / "no-envs"))
    task = bug_task(calc_repo).model_dump(exclude_none=True)
    task["snapshot"] = {"package": "calc==1.0", "patch": task["snapshot"]["patch"]}
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    argv = _argv(tasks, tmp_path / "o", "oracle")
    assert main(argv) == 2  # not fetched: said before any work
    err = capsys.readouterr().err
    assert "not fetched: calc==1.0" in err and "--repos" in err
    assert main([*argv, "--repos", str(tmp_path / "missing")]) == 2
    assert "--repos" in capsys.readouterr().err
    repos = _fetched(tmp_path / "elsewhere", repo=calc_repo)
    envs = tmp_path / "envs"
    envs.mkdir()
    assert main([*argv, "--repos", str(repos), "--envs", str(envs)]) == 0, capsys.readouterr().err
    assert "pass@1 1.000" in capsys.readouterr().out


class _CutPolicy:
    """Writes until the cap cuts it, as an untrained model does."""

    name = "rambler"

    async def generate(self, messages):
        return Generation(
            text="Let me think about th",
            completion_tokens=16,
            finish_reason="length",
            max_new_tokens=16,
        )


async def test_the_report_counts_samples_a_limit_stopped_and_replies_cut(calc_repo, tmp_path):
    report = await run_eval(
        [bug_task(calc_repo)], lambda task: _CutPolicy(), local_sessions("local"), EvalConfig()
    )
    [sample] = report.samples
    assert sample.stop_reason == "limit" and "max_new_tokens=16" in sample.stop_detail
    s = report.summary
    assert (s["finished"], s["stopped_by_limit"], s["turns_cut"], s["errors"]) == (0, 1, 1.0, 0)
    md = markdown(report)
    assert "| samples a limit stopped" in md
    assert "| replies cut at max_new_tokens per task | 1.000 |" in md
