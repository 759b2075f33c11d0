"""A stop whose cleanup hangs still ends the CLI process: after the grace, every thread's
stack on stderr and exit 128 + signal (``cheetah/stop.py``); before issue 45's CI run, one
``cheetah train`` was still running 600 s after its SIGTERM and nothing said where."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

HANGS = textwrap.dedent(
    """
    import asyncio, os, signal, subprocess, sys, time
    from cheetah import stop

    stop.exit_within(GRACE)
    child = subprocess.Popen(["sleep", "600"])  # a server the job started

    async def job():
        async with stop.stop_on_signal():
            try:
                print(f"ready {child.pid}", flush=True)
                await asyncio.sleep(600)
            finally:
                time.sleep(600)  # a cleanup that never ends (a blocking call in a finally)

    asyncio.run(job())
    """
)


def _run(grace: float) -> tuple[int, str, float, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGS.replace("GRACE", repr(grace))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        word, child = proc.stdout.readline().split()
        assert word == "ready"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        return proc.returncode, err, time.monotonic() - t0, int(child)
    finally:
        if proc.poll() is None:
            proc.kill()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_hung_stop_ends_with_the_stacks_after_the_grace():
    code, err, took, child = _run(grace=1.0)
    assert code == 128 + signal.SIGTERM, err
    assert not _running(child)  # its child process was ended too, not left behind
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


ABANDONS = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from cheetah import stop

    stop.exit_within(300)

    def step():
        WORK
        return "done"

    async def job():
        async with stop.stop_on_signal():
            assert await stop.abandonable(lambda: 41 + 1) == 42
            try:
                await stop.abandonable(int, "x")
            except ValueError:
                pass  # the thread's error reaches the awaiting task
            print("ready", flush=True)
            await stop.abandonable(step)

    try:
        asyncio.run(job())
    except stop.Stopped as e:  # as `cheetah train` ends (cheetah/cli/train.py)
        print("left:", stop.abandoned(), file=sys.stderr, flush=True)
        if stop.abandoned():
            os._exit(e.exit_status)
        sys.exit(e.exit_status)
    """
)


@pytest.mark.parametrize("work", ["sleep", "torch"])
def test_a_stop_does_not_wait_for_a_step_in_its_thread(work):
    # a trainer step in its thread: the stop leaves it, and the process exits now, not when
    # the step ends (asyncio.to_thread joins its threads at exit), and without the abort a
    # process finalizing beside torch's computing thread gets
    step = {
        "sleep": "print('computing', flush=True)\n    time.sleep(600)",
        "torch": "import torch\n    a = torch.randn(1024, 1024)\n"
        "    print('computing', flush=True)\n"
        "    for _ in range(10**6): a = (a @ a).clamp(-1, 1)",
    }[work]
    proc = subprocess.Popen(
        [sys.executable, "-c", ABANDONS.replace("WORK", step)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert proc.stdout.readline() == "computing\n"
        time.sleep(0.5)  # inside the step's loop
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=200)  # far below the step and the grace
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "left: ['step']" in err and "the stop took over" not in err
