from cheetah.tools.base import Limits, ToolContext
from tests.conftest import call_tool


def _tree(root):
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(
        "def parse_args():\n    pass\n\ndef Parse_file():\n    pass\n"
    )
    (root / "src" / "util.js").write_text("function parse_args() {}\n")
    (root / "docs").mkdir()
    (root / "docs" / "notes.md").write_text("parse_args is documented here\n")


async def test_regex_path_and_glob(ws):
    _tree(ws.root)
    r = await call_tool(ws, "grep", pattern=r"def parse_\w+")
    assert r.output == "src/app.py:1: def parse_args():"
    r = await call_tool(ws, "grep", pattern="parse_args", path="src")
    assert r.output.splitlines() == [
        "src/app.py:1: def parse_args():",
        "src/util.js:1: function parse_args() {}",
    ]
    r = await call_tool(ws, "grep", pattern="parse_args", glob="*.md")
    assert r.output == "docs/notes.md:1: parse_args is documented here"
    r = await call_tool(ws, "grep", pattern="def parse_file", case_insensitive="true")
    assert r.output == "src/app.py:4: def Parse_file():"


async def test_gitignore_respected_nested_and_binary_skipped(ws):
    _tree(ws.root)
    (ws.root / ".gitignore").write_text("*.log\nbuild/\n")
    (ws.root / "build").mkdir()
    (ws.root / "build" / "out.py").write_text("parse_args\n")
    (ws.root / "debug.log").write_text("parse_args\n")
    (ws.root / "src" / ".gitignore").write_text("generated.py\n")
    (ws.root / "src" / "generated.py").write_text("parse_args\n")
    (ws.root / "blob.bin").write_bytes(b"parse_args\x00\x01")
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "config").write_text("parse_args\n")
    r = await call_tool(ws, "grep", pattern="parse_args")
    files = {line.split(":")[0] for line in r.output.splitlines()}
    assert files == {"src/app.py", "src/util.js", "docs/notes.md"}


async def test_cap_no_match_and_bad_regex(ws):
    (ws.root / "many.txt").write_text("hit\n" * 50)
    ctx = ToolContext(workspace=ws, limits=Limits(grep_max_matches=10))
    r = await call_tool(ws, "grep", ctx=ctx, pattern="hit")
    assert len(r.output.splitlines()) == 11
    assert "[50 matches in 1 files; showing the first 10." in r.output
    r = await call_tool(ws, "grep", pattern="absent")
    assert r.output == "No matches for 'absent' (1 files searched)." and not r.is_error
    r = await call_tool(ws, "grep", pattern="(unclosed")
    assert r.is_error and "invalid regular expression" in r.output
    assert (await call_tool(ws, "grep", pattern="x", path="nope")).is_error


async def test_literal_matches_a_quoted_line_of_code_as_plain_text(ws):
    (ws.root / "geo.py").write_text("def norm(x, y):\n    return (x ** 2 + y ** 2) ** 0.5\n")
    line = "return (x ** 2 + y ** 2) ** 0.5"
    r = await call_tool(ws, "grep", pattern=line)  # as a regex: '**' repeats nothing
    assert r.is_error and "invalid regular expression" in r.output
    r = await call_tool(ws, "grep", pattern=line, literal="true")
    assert r.output == f"geo.py:2:     {line}"
    r = await call_tool(ws, "grep", pattern="x ** 2 + y", literal="yes")
    assert r.output.startswith("geo.py:2:")
    r = await call_tool(ws, "grep", pattern=line, literal="maybe")
    assert r.is_error and "<literal> must be true or false" in r.output
