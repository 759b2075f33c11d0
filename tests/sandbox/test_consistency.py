"""The same message gives byte-identical tool results on the user's repo, in an isolated
session, and through an env server: `cheetah tools run` in its three modes."""

import os
import shutil
import subprocess

from cheetah.harness.protocol import render_call
from tests.conftest import SAMPLE_REPO
from tests.sandbox.conftest import BIN, needs_isolation

pytestmark = needs_isolation

MESSAGE = "\n".join(
    [
        "Let me look around and make a change.",
        render_call("list_dir", {"path": ".", "depth": "2"}),
        render_call(
            "read_file", {"path": "textkit/stats.py", "start_line": "10", "end_line": "25"}
        ),
        render_call("grep", {"pattern": r"def \w+", "glob": "*.py"}),
        render_call(
            "edit_file",
            {"path": "textkit/stats.py", "old_str": "ranked[: n - 1]", "new_str": "ranked[:n]"},
        ),
        render_call("edit_file", {"path": "notes/todo.md", "new_str": "# notes\n- café ✓\n"}),
        render_call(
            "run_terminal",
            {
                "command": "cat README.md | head -3; echo err >&2; "
                "python -c 'print(sum(range(10)))'; exit 4"
            },
        ),
        # only the limit can end this sleep, however busy the host: the same result each time
        render_call("run_terminal", {"command": "sleep 600", "timeout": "0.5"}),
        render_call("lint", {"paths": "textkit"}),
        render_call("todo", {"items": "- [x] look\n- [~] change"}),
        render_call("read_file", {"path": "../outside.txt"}),
        render_call("nope", {}),
        '<tool name="grep"><pattern>x</tool>',
    ]
)


def tools_run(repo, *flags):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    r = subprocess.run(
        [BIN / "cheetah", "tools", "run", "--repo", str(repo), *flags],
        input=MESSAGE,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def fresh(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(SAMPLE_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_local_isolated_and_server_results_are_byte_identical(tmp_path, env_server):
    local = tools_run(fresh(tmp_path, "a"))
    isolated = tools_run(fresh(tmp_path, "b"), "--sandbox")
    srv = env_server()
    served = tools_run(
        fresh(tmp_path, "c"), "--server", srv.url, "--token-file", str(srv.token_file)
    )
    assert local.count("<tool_result ") == 12
    assert "exit code: 4\n" in local and "timed out after 0.5 s" in local
    assert 'name="lint" index="8">\nNo lint problems in textkit.' in local
    assert isolated == local
    assert served == local


def test_agent_in_sandbox_fixes_the_bug_and_leaves_the_repo_untouched(tmp_path):
    from tests.conftest import FIX_SCRIPT

    repo = fresh(tmp_path, "d")
    before = (repo / "textkit" / "stats.py").read_text()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "120"}
    r = subprocess.run(
        [
            BIN / "cheetah",
            "agent",
            "fix the tests",
            "--repo",
            str(repo),
            "--model",
            f"scripted:{FIX_SCRIPT}",
            "--sandbox",
            "--out",
            str(tmp_path / "t.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "changes in the sandbox" in r.stdout and "+    return ranked[:n]" in r.stdout
    assert "8 passed" in r.stdout  # the tests ran inside the sandbox after the fix
    assert (repo / "textkit" / "stats.py").read_text() == before
