"""A stop whose cleanup hangs still ends the CLI process: after the grace, every thread's
stack on stderr and exit 128 + signal (``cheetah/stop.py``); before issue 45's CI run, one
``cheetah train`` was still running 600 s after its SIGTERM and nothing said where."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

HANGS = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from cheetah import stop

    stop.exit_within(GRACE)

    async def job():
        async with stop.stop_on_signal():
            try:
                print("ready", flush=True)
                await asyncio.sleep(600)
            finally:
                time.sleep(600)  # a cleanup that never ends (a blocking call in a finally)

    asyncio.run(job())
    """
)


def _run(grace: float) -> tuple[int, str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGS.replace("GRACE", repr(grace))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_hung_stop_ends_with_the_stacks_after_the_grace():
    code, err, took = _run(grace=1.0)
    assert code == 128 + signal.SIGTERM, err
    assert "the stop took over 1 s" in err
    assert "Timeout (0:00:01)!" in err and "in job" in err  # the stacks: where it hung
    assert took >= 1.0  # not before the grace


def test_usr1_prints_the_stacks_and_the_process_goes_on(tmp_path):
    script = (
        "import sys, time\nfrom cheetah import stop\nstop.exit_within()\n"
        "print('ready', flush=True)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        assert proc.poll() is None  # a dump, not an end
    finally:
        proc.kill()
    _, err = proc.communicate(timeout=60)
    assert "Current thread" in err or "Thread 0x" in err
