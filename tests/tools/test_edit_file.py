from tests.conftest import call_tool

SRC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_exact_replace_once_with_snippet_and_diff(ws):
    (ws.root / "m.py").write_text("x = 1\ny = 2\n")
    r = await call_tool(ws, "edit_file", path="m.py", old_str="y = 2", new_str="y = 3")
    assert not r.is_error
    assert (ws.root / "m.py").read_text() == "x = 1\ny = 3\n"
    assert r.output == "Edited m.py:\n     1\tx = 1\n     2\ty = 3"
    assert "-y = 2\n+y = 3" in r.meta["diff"]


async def test_newline_after_opening_tag_is_dropped(ws):
    (ws.root / "m.py").write_text(SRC)
    r = await call_tool(
        ws,
        "edit_file",
        path="m.py",
        old_str="\ndef add(a, b):\n    return a - b\n",
        new_str="\ndef add(a, b):\n    return a + b\n",
    )
    assert not r.is_error, r.output
    assert (ws.root / "m.py").read_text().startswith("def add(a, b):\n    return a + b\n")


async def test_several_matches_give_line_numbers(ws):
    (ws.root / "m.py").write_text(SRC)
    r = await call_tool(ws, "edit_file", path="m.py", old_str="return a - b", new_str="x")
    assert r.is_error
    assert "occurs 2 times in m.py (starting on lines 2, 6)" in r.output
    assert (ws.root / "m.py").read_text() == SRC


async def test_no_match_points_at_near_misses(ws):
    (ws.root / "m.py").write_text(SRC)
    r = await call_tool(
        ws, "edit_file", path="m.py", old_str="  def sub(a, b):\n  return a - b", new_str="x"
    )
    assert r.is_error and "does not occur in m.py" in r.output
    assert "line(s) 5" in r.output
    r = await call_tool(ws, "edit_file", path="m.py", old_str="nothing like it", new_str="x")
    assert "appears nowhere" in r.output


async def test_create_new_file_and_refuse_overwrite(ws):
    r = await call_tool(ws, "edit_file", path="pkg/new.py", new_str="\nprint('hi')\n")
    assert r.output == "Created pkg/new.py (1 lines)."
    assert (ws.root / "pkg" / "new.py").read_text() == "print('hi')\n"
    r = await call_tool(ws, "edit_file", path="pkg/new.py", new_str="other")
    assert r.is_error and "already exists" in r.output
    assert (ws.root / "pkg" / "new.py").read_text() == "print('hi')\n"


async def test_errors_for_missing_binary_and_non_utf8(ws):
    r = await call_tool(ws, "edit_file", path="nope.py", old_str="a", new_str="b")
    assert r.is_error and "leave out <old_str>" in r.output
    (ws.root / "b.bin").write_bytes(b"\x00\x01a")
    assert (
        "binary"
        in (await call_tool(ws, "edit_file", path="b.bin", old_str="a", new_str="b")).output
    )
    (ws.root / "l.txt").write_bytes(b"caf\xe9")
    assert (
        "UTF-8"
        in (await call_tool(ws, "edit_file", path="l.txt", old_str="caf", new_str="b")).output
    )
    (ws.root / "e.py").write_text("abc")
    assert (
        "empty" in (await call_tool(ws, "edit_file", path="e.py", old_str="", new_str="b")).output
    )


async def test_crlf_files_keep_their_line_endings(ws):
    (ws.root / "w.txt").write_bytes(b"a\r\nb\r\n")
    r = await call_tool(ws, "edit_file", path="w.txt", old_str="b", new_str="c")
    assert not r.is_error
    assert (ws.root / "w.txt").read_bytes() == b"a\r\nc\r\n"


async def test_an_edit_that_changes_nothing_is_an_error(ws):
    (ws.root / "m.py").write_text(SRC)
    r = await call_tool(
        ws, "edit_file", path="m.py", old_str="return a - b\n\n", new_str="return a - b\n\n"
    )
    assert r.is_error and "would change nothing" in r.output
    assert (ws.root / "m.py").read_text() == SRC


async def test_symlinks_fifos_and_oversized_files_are_refused(ws, tmp_path):
    import os

    (ws.root / "real.py").write_text("x = 1\n")
    os.symlink("real.py", ws.root / "alias.py")
    os.mkfifo(ws.root / "pipe")
    (ws.root / "big.txt").write_bytes(b"a\n" * 1_500_000)
    r = await call_tool(ws, "edit_file", path="alias.py", old_str="x = 1", new_str="x = 2")
    assert r.is_error and "symbolic link to 'real.py'" in r.output
    r = await call_tool(ws, "edit_file", path="pipe", old_str="a", new_str="b")
    assert r.is_error and "not a regular file" in r.output
    r = await call_tool(ws, "edit_file", path="big.txt", old_str="a", new_str="b")
    assert r.is_error and "edits files up to" in r.output
    assert (ws.root / "real.py").read_text() == "x = 1\n"
