import time

from cheetah.tools.base import Limits, ToolContext
from tests.conftest import call_tool


async def test_exit_code_and_output(ws):
    r = await call_tool(ws, "run_terminal", command="echo hello; echo oops >&2; exit 3")
    assert r.output == "exit code: 3\nhello\noops"
    assert r.meta["exit_code"] == 3 and not r.is_error
    r = await call_tool(ws, "run_terminal", command="true")
    assert r.output == "exit code: 0\n(no output)"


async def test_timeout_kills_the_command(ws):
    # Only the 2 s limit can end the 600 s sleep, however busy the machine (2 s leave a busy
    # machine time to start bash and echo); ending within 120 s shows the command was killed.
    t0 = time.monotonic()
    r = await call_tool(ws, "run_terminal", command="echo started; sleep 600", timeout="2")
    assert time.monotonic() - t0 < 120
    assert r.is_error and r.output.startswith("timed out after 2 s") and "started" in r.output


async def test_background_process_does_not_hold_the_call(ws):
    # Held by its background sleep, the call would last until the 60 s default limit (and say
    # "timed out"): 30 s is far below that and far above a busy machine's correct run.
    t0 = time.monotonic()
    r = await call_tool(ws, "run_terminal", command="sleep 600 & echo done")
    assert time.monotonic() - t0 < 30
    assert r.output == "exit code: 0\ndone"


async def test_huge_output_keeps_head_and_tail(ws):
    ctx = ToolContext(workspace=ws, limits=Limits(terminal_output_bytes=1000))
    r = await call_tool(ws, "run_terminal", ctx=ctx, command="seq 1 100000")
    lines = r.output.splitlines()
    assert lines[1] == "1" and lines[-1] == "100000"
    assert "bytes of output omitted" in r.output and len(r.output) < 1200


async def test_cwd_and_bad_arguments(ws):
    (ws.root / "sub").mkdir()
    r = await call_tool(ws, "run_terminal", command="basename $PWD", cwd="sub")
    assert r.output == "exit code: 0\nsub"
    assert (
        "must be a number"
        in (await call_tool(ws, "run_terminal", command="x", timeout="soon")).output
    )
    assert (
        "between 0 and" in (await call_tool(ws, "run_terminal", command="x", timeout="-1")).output
    )
    assert "empty" in (await call_tool(ws, "run_terminal", command="  ")).output
    assert (await call_tool(ws, "run_terminal", command="ls", cwd="nope")).is_error


async def test_binary_output_is_decoded_safely(ws):
    r = await call_tool(ws, "run_terminal", command="printf 'a\\xff\\x00b'")
    assert r.output.startswith("exit code: 0\na\ufffd")
