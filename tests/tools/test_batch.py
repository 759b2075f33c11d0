from cheetah.core.wire import ToolCall
from cheetah.harness.protocol import parse_message
from cheetah.tools import default_tools
from cheetah.tools.base import Access, Tool, ToolContext, ToolOutput
from cheetah.tools.batch import run_batch
from cheetah.tools.order import conflicts


def _calls(text):
    return parse_message(text)


async def test_independent_calls_overlap_and_keep_call_order(ws):
    # A barrier, not a stopwatch: each command marks that it started, then waits until all
    # five have, which only calls that run at the same time can do (serial calls would each
    # wait out their 50 s limit, and fail). Then 0.2 s of sleep, which each wall time covers.
    barrier = "touch started.$I; until [ $(ls started.* | wc -l) -ge 5 ]; do sleep 0.01; done"
    msg = "".join(
        '<tool name="run_terminal"><timeout>50</timeout>'
        f"<command>I={i}; {barrier}; sleep 0.2; echo {i}</command></tool>"
        for i in range(5)
    )
    results = await run_batch(_calls(msg), ToolContext(workspace=ws), default_tools())
    assert [r.output for r in results] == [f"exit code: 0\n{i}" for i in range(5)]
    assert [r.index for r in results] == [1, 2, 3, 4, 5]
    assert all(r.wall_s >= 0.2 for r in results)


async def test_edit_then_read_of_same_path_keeps_message_order(ws):
    (ws.root / "f.txt").write_text("old\n")
    msg = (
        '<tool name="read_file"><path>f.txt</path></tool>'
        '<tool name="edit_file"><path>f.txt</path><old_str>old</old_str><new_str>new</new_str></tool>'
        '<tool name="read_file"><path>./f.txt</path></tool>'
        '<tool name="grep"><pattern>new</pattern></tool>'
    )
    r = await run_batch(_calls(msg), ToolContext(workspace=ws), default_tools())
    assert r[0].output == "     1\told"
    assert not r[1].is_error
    assert r[2].output == "     1\tnew"
    assert r[3].output == "f.txt:1: new"


def test_conflict_rule():
    read = lambda *p: Access(reads=frozenset(p))  # noqa: E731
    write = lambda *p: Access(writes=frozenset(p))  # noqa: E731
    assert conflicts(write("a.py"), read("a.py")) and conflicts(read("a.py"), write("a.py"))
    assert conflicts(write("src/a.py"), read("src")) and conflicts(read("."), write("x"))
    assert not conflicts(read("a.py"), read("a.py"))
    assert not conflicts(write("src/a.py"), write("src/ab.py"))
    assert not conflicts(write(":todo"), read("."))


async def test_bad_calls_become_error_results(ws):
    msg = (
        '<tool name="nope"><x>1</x></tool>'
        '<tool name="read_file"><pth>a</pth></tool>'
        '<tool name="read_file"><path>a</path><colour>red</colour></tool>'
        '<tool name="grep"><pattern>x</pattern>'
    )
    r = await run_batch(_calls(msg), ToolContext(workspace=ws), default_tools())
    assert all(x.is_error for x in r)
    assert "unknown tool 'nope'; the tools are: read_file, list_dir" in r[0].output
    assert "unknown argument <pth>; read_file takes <path>, <start_line>, <end_line>" in r[1].output
    assert "unknown argument <colour>" in r[2].output
    assert "call 4 (grep): missing </tool>" in r[3].output
    msg = '<tool name="read_file"></tool>'
    [r] = await run_batch(_calls(msg), ToolContext(workspace=ws), default_tools())
    assert "missing required argument <path>" in r.output


async def test_a_crashing_or_hanging_tool_is_contained(ws):
    async def boom(args, ctx):
        raise RuntimeError("kaput")

    async def hang(args, ctx):
        import asyncio

        await asyncio.sleep(60)
        return ToolOutput("never")

    from cheetah.core.wire import ToolSpec

    tools = {"boom": Tool(ToolSpec("boom", "x"), boom), "hang": Tool(ToolSpec("hang", "x"), hang)}
    calls = [ToolCall(1, "boom"), ToolCall(2, "hang")]
    r = await run_batch(calls, ToolContext(workspace=ws), tools, call_timeout_s=0.3)
    assert r[0].output == "Error: call 1 (boom) failed inside the tool: RuntimeError: kaput"
    assert r[1].output == "Error: call 2 (hang) did not finish within 0.3 s"
