from cheetah.tools.base import ToolContext
from tests.conftest import call_tool


async def test_lint_reports_diagnostics_with_relative_paths(ws):
    (ws.root / "bad.py").write_text("import os\n")
    (ws.root / "good.py").write_text("x = 1\n")
    r = await call_tool(ws, "lint", paths="bad.py good.py")
    assert r.output.splitlines()[0].startswith("bad.py:1:8: F401")
    assert r.output.endswith("[1 problem(s) in bad.py good.py]")
    assert r.meta["codes"] == ["F401"]
    r = await call_tool(ws, "lint", paths="good.py")
    assert r.output == "No lint problems in good.py."


async def test_lint_uses_the_repo_config(ws):
    (ws.root / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["E711"]\n')
    (ws.root / "a.py").write_text("import os\nx = None\nprint(x == None)\n")
    r = await call_tool(ws, "lint")
    assert "E711" in r.output and "F401" not in r.output


async def test_lint_missing_path(ws):
    r = await call_tool(ws, "lint", paths="nope.py")
    assert r.is_error and "no file or directory at 'nope.py'" in r.output


async def test_todo_replaces_the_list_and_keeps_state(ws):
    ctx = ToolContext(workspace=ws)
    r = await call_tool(
        ws, "todo", ctx=ctx, items="- [ ] read\n- [~] fix\n- [x] plan\nplain item\n"
    )
    assert r.output == (
        "Todo list (1/4 done):\n- [ ] read\n- [~] fix\n- [x] plan\n- [ ] plain item"
    )
    assert [t.status for t in ctx.todos] == ["pending", "in_progress", "done", "pending"]
    assert r.meta["todos"][1] == {"text": "fix", "status": "in_progress"}
    r = await call_tool(ws, "todo", ctx=ctx, items="")
    assert r.output == "The todo list is empty." and ctx.todos == []
    r = await call_tool(ws, "todo", ctx=ctx, items="- [ ]\n")
    assert r.is_error and "line 1" in r.output
