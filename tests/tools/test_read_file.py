from cheetah.tools.base import Limits, ToolContext
from tests.conftest import call_tool


async def test_numbered_lines_and_range(ws):
    (ws.root / "a.py").write_text("one\ntwo\nthree\nfour\n")
    r = await call_tool(ws, "read_file", path="a.py")
    assert r.output == "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    r = await call_tool(ws, "read_file", path="a.py", start_line="2", end_line="3")
    assert r.output == "     2\ttwo\n     3\tthree"


async def test_long_file_is_cut_with_a_note(ws):
    (ws.root / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    ctx = ToolContext(workspace=ws, limits=Limits(read_max_lines=100))
    r = await call_tool(ws, "read_file", ctx=ctx, path="big.txt")
    lines = r.output.splitlines()
    assert lines[99] == "   100\tline 100"
    assert lines[-1] == "[showing lines 1-100 of 1000; read on with start_line=101]"
    r = await call_tool(ws, "read_file", ctx=ctx, path="big.txt", start_line="950")
    assert r.output.splitlines()[-1] == "  1000\tline 1000"


async def test_huge_file_reads_a_range_without_counting_it_all(ws):
    with open(ws.root / "huge.log", "w") as fh:
        for i in range(300_000):
            fh.write(f"entry {i}\n")
    ctx = ToolContext(workspace=ws, limits=Limits(read_max_lines=5, read_max_bytes=1_000_000))
    r = await call_tool(ws, "read_file", ctx=ctx, path="huge.log", start_line="10")
    assert r.output.splitlines()[0] == "    10\tentry 9"
    assert "of a large file" in r.output and "start_line=15" in r.output


async def test_long_lines_are_cut(ws):
    (ws.root / "min.js").write_text("x" * 5000 + "\n")
    r = await call_tool(ws, "read_file", path="min.js")
    assert "[... 3000 characters cut]" in r.output and len(r.output) < 2100


async def test_binary_and_non_utf8(ws):
    (ws.root / "img.png").write_bytes(b"\x89PNG\x00\x00\x01")
    r = await call_tool(ws, "read_file", path="img.png")
    assert r.is_error and "binary file" in r.output
    (ws.root / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    r = await call_tool(ws, "read_file", path="latin.txt")
    assert not r.is_error and "caf\ufffd" in r.output and "not valid UTF-8" in r.output


async def test_errors_for_missing_dir_empty_and_bad_ranges(ws):
    (ws.root / "d").mkdir()
    (ws.root / "e.txt").write_text("")
    (ws.root / "f.txt").write_text("a\nb\n")
    assert "no file at 'nope.py'" in (await call_tool(ws, "read_file", path="nope.py")).output
    assert "is a directory" in (await call_tool(ws, "read_file", path="d")).output
    assert (await call_tool(ws, "read_file", path="e.txt")).output == "e.txt is empty."
    r = await call_tool(ws, "read_file", path="f.txt", start_line="9")
    assert r.is_error and "past the end" in r.output and "(2 lines)" in r.output
    r = await call_tool(ws, "read_file", path="f.txt", start_line="two")
    assert r.is_error and "<start_line> must be a whole number" in r.output
    r = await call_tool(ws, "read_file", path="f.txt", start_line="2", end_line="1")
    assert r.is_error and "before start_line" in r.output
