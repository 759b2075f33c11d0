from tests.conftest import call_tool


async def test_dirs_first_with_sizes(ws):
    (ws.root / "src").mkdir()
    (ws.root / "src" / "app.py").write_text("x = 1\n")
    (ws.root / "README.md").write_text("hi\n")
    (ws.root / ".git").mkdir()
    r = await call_tool(ws, "list_dir")
    assert r.output == "./\nsrc/\nREADME.md  (3 bytes)"
    r = await call_tool(ws, "list_dir", path=".", depth="2")
    assert r.output == "./\nsrc/\n  app.py  (6 bytes)\nREADME.md  (3 bytes)"


async def test_gitignored_entries_hidden_below_first_level(ws):
    (ws.root / ".gitignore").write_text("build/\n*.log\n")
    (ws.root / "pkg").mkdir()
    (ws.root / "pkg" / "a.py").write_text("")
    (ws.root / "pkg" / "debug.log").write_text("")
    (ws.root / "pkg" / "build").mkdir()
    r = await call_tool(ws, "list_dir", path="pkg")
    assert "a.py" in r.output
    r = await call_tool(ws, "list_dir", depth="2")
    assert "a.py" in r.output and "debug.log" not in r.output and "build/" not in r.output


async def test_caps_and_errors(ws):
    for i in range(450):
        (ws.root / f"f{i:03d}").write_text("")
    r = await call_tool(ws, "list_dir")
    assert r.output.endswith("[50 more entries not shown; list a subdirectory to see them]")
    assert (await call_tool(ws, "list_dir", path="nope")).is_error
    assert "is a file" in (await call_tool(ws, "list_dir", path="f001")).output
    assert "depth must be" in (await call_tool(ws, "list_dir", depth="9")).output
