"""Stopping a long job on SIGTERM or SIGINT: cancel it, let it close, report how.

``cheetah train``, ``eval`` and the ``tasks`` verbs each run one asyncio task.
``StopOnSignal`` turns the first SIGTERM or SIGINT into a cancel of that task, so the job's
``finally`` blocks close what it started: sessions and their sandboxes (mounts, cgroups,
processes), the env server, trainer ranks, loggers, the run store. For training, every
finished rollout and checkpoint is already on disk, which is what ``--resume`` needs; a step
in flight is abandoned. The caller raises ``Stopped``; the CLI exits with ``128 + signal``
(``cheetah train`` shuts Ray down first). A second signal ends the process at once (the
default action), for a stop that hangs.

Why not Ray's own handler: ``ray.init`` installs one that calls ``sys.exit`` wherever the main
thread happens to be; the run then aborted inside Ray's shutdown and left its agents running.
So the job installs this handler again right after ``ray.init`` (``install``).

A trainer step runs minutes on a slow CPU: ``abandonable`` runs it in a daemon thread, so a
stop does not wait for it (``asyncio.to_thread``'s threads are joined before the process
exits: a stop during an SFT step took the rest of the step, 105 s on an AVX2-held CPU). A
process must not finalize while such a thread computes (torch aborts it: "terminate called
without an active exception"), so the CLI ends with ``os._exit`` once it has closed
everything when ``abandoned`` lists one.

A stop that hangs in its cleanup must not hang the process: the CLI arms ``exit_within``, so
``GRACE_S`` after the signal every thread's stack goes to stderr (where it hung) and the
process ends with ``128 + signal``. ``kill -USR1`` prints the same stacks at any time
(``faulthandler``), for a run that looks stuck.
Deliberately left out: finishing the step in flight (a stop should not wait minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import glob
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 120.0  # the longest a stop may take to close what the job started
_armed: list[float] = []  # the grace ``exit_within`` armed (none in library use)


def exit_within(grace_s: float = GRACE_S) -> None:
    """For a CLI process: a stop that takes over ``grace_s`` dumps every thread's stack and
    ends the process (see the module docstring); ``kill -USR1`` dumps the stacks now."""
    _armed[:] = [grace_s]
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def _deadline(signum: int) -> None:
    """Start the armed grace period of a stop (nothing when not armed)."""
    if not _armed:
        return
    grace = _armed[0]
    faulthandler.dump_traceback_later(grace, exit=False)

    def end() -> None:
        print(
            f"cheetah: the stop took over {grace:.0f} s; ending now (the stacks above show "
            "where it hung), SIGTERM to its child processes first",
            file=sys.stderr,
            flush=True,
        )
        _end_children()
        os._exit(128 + signum)

    timer = threading.Timer(grace + 1.0, end)
    timer.daemon = True
    timer.start()


def _children() -> list[int]:
    """This process's child processes (Linux ``/proc``; none elsewhere)."""
    me, found = str(os.getpid()), []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == me:
            found.append(int(stat.split("/")[2]))
    return found


def _end_children(wait_s: float = 10.0) -> None:
    """SIGTERM this process's children (the env server closes its sessions, Ray's processes
    go) and wait up to ``wait_s`` for them: what a process ending without its cleanup
    would otherwise leave running."""
    children = _children()
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if _alive(pid)]
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # reaped now
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


class Stopped(Exception):
    """The run was stopped by a signal; its resources are closed."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class StopOnSignal:
    """Cancel ``task`` on the first SIGTERM/SIGINT (see the module docstring)."""

    def __init__(self, task: asyncio.Task) -> None:
        self.task, self.signum = task, 0
        self.loop = asyncio.get_running_loop()

    def install(self) -> None:
        """Take SIGTERM and SIGINT (again: after ``ray.init`` set its own)."""
        for sig in SIGNALS:
            self.loop.add_signal_handler(sig, self._on_signal, sig)

    def restore(self) -> None:
        for sig in SIGNALS:
            self.loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        if self.signum:  # a second signal: the default action, now
            self.restore()
            os.kill(os.getpid(), sig)
            return
        self.signum = sig
        _deadline(sig)
        self.task.cancel()

    def stopped(self, error: BaseException) -> Stopped | None:
        """The ``Stopped`` a cancel caused by a signal becomes, else None."""
        return (
            Stopped(self.signum)
            if self.signum and isinstance(error, asyncio.CancelledError)
            else None
        )


async def abandonable(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a daemon thread, awaited: ``asyncio.to_thread`` whose thread a cancel
    abandons (it runs on, unawaited, and ends with the process). For work whose result a
    stop throws away anyway (a trainer step: resume starts from the last checkpoint)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if done.done():  # cancelled: nobody waits for it
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:  # handed to the awaiting task
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed: the job is gone
            loop.call_soon_threadsafe(settle, result, error)

    thread = threading.Thread(target=work, name=getattr(fn, "__name__", "work"), daemon=True)
    _threads.add(thread)
    thread.start()
    return await done


_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def abandoned() -> list[str]:
    """The names of ``abandonable`` threads still running (a stop left them)."""
    return sorted(t.name for t in list(_threads) if t.is_alive())


@contextlib.asynccontextmanager
async def stop_on_signal() -> AsyncIterator[StopOnSignal]:
    """Around the body of the current task: SIGTERM/SIGINT cancel it, and the cancel leaves
    the block as ``Stopped`` (any other cancel as itself); the handlers are put back after."""
    stop = StopOnSignal(asyncio.current_task())  # type: ignore[arg-type]
    stop.install()
    try:
        yield stop
    except asyncio.CancelledError as e:
        if (stopped := stop.stopped(e)) is None:
            raise
        raise stopped from None
    finally:
        stop.restore()
