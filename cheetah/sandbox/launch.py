"""`EnvServerProcess`: an env server (``cheetah env serve``) as a child process on this machine.

Jobs that want the production path without a fleet of their own (``cheetah train``
and ``cheetah eval --sandbox fleet`` with no ``--env-url``) start one here and talk
to it through ``EnvFleet`` like to any remote server (snapshots go up as uploads, so
it needs no ``snapshot_roots``; give some to let clients name paths). The token is random and
written to a 0600 file in ``workdir``; the server's output goes to
``workdir/env-server-PORT.log`` (a file, so a chatty server can never block on a
full pipe). Stopping closes every session (processes killed, layers unmounted), and
so does the death of the process that started it (``PR_SET_PDEATHSIG``; start it
from the main thread, since the signal follows the starting thread).

A server that dies without closing its sessions (``kill``, the OOM killer) leaves
their mounts and cgroups behind; the next server started on the same base dir takes
them back (``reclaim.reclaim_dead_sessions``), and so can anyone with ``base_dir``.

Deliberately left out: restarting a server that died (the fleet fails over to
another server when there is one; with one local server the job sees the error).
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from cheetah.core.http_gate import write_token
from cheetah.core.ports import free_port
from cheetah.sandbox.config import SandboxConfig, default_base_dir

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGTERM when the parent dies, so a killed job leaves no server behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _toml_line(key: str, value: object) -> str:
    if isinstance(value, bool):
        return f"{key} = {str(value).lower()}\n"
    if isinstance(value, int | float):
        return f"{key} = {value}\n"
    return f"{key} = {json.dumps(str(value))}\n"


class EnvServerProcess:
    def __init__(
        self,
        workdir: str | Path,
        *,
        backend: str = "isolated",
        capacity: int = 64,
        config: SandboxConfig | None = None,
        idle_timeout_s: float = 1800.0,
        reap_interval_s: float = 30.0,
        token: str | None = None,
        snapshot_roots: Sequence[str | Path] = (),
        limits_file: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.backend, self.capacity = backend, capacity
        self.config = config
        self.idle_timeout_s, self.reap_interval_s = idle_timeout_s, reap_interval_s
        self.token = token or secrets.token_hex(16)
        self.snapshot_roots = [Path(r) for r in snapshot_roots]
        self.limits_file = limits_file
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_dir(self) -> Path:
        """Where the server keeps snapshots and sessions (its config's, or the default)."""
        return self.config.base_dir if self.config is not None else default_base_dir()

    @property
    def token_file(self) -> Path:
        return self.workdir / f"env-token-{self.port}"

    def _spawn(self) -> subprocess.Popen:
        self.port = free_port()
        write_token(self.token_file, self.token)  # never through a link planted there
        argv = [
            sys.executable,
            "-m",
            "cheetah.cli",
            "env",
            "serve",
            "--port",
            str(self.port),
            "--token-file",
            str(self.token_file),
            "--backend",
            self.backend,
            "--capacity",
            str(self.capacity),
            "--idle-timeout-s",
            str(self.idle_timeout_s),
            "--reap-interval-s",
            str(self.reap_interval_s),
        ]
        for root in self.snapshot_roots:
            argv += ["--snapshot-root", str(root)]
        if self.limits_file is not None:
            argv += ["--limits", str(self.limits_file)]
        if self.config is not None:
            cfg = self.workdir / f"sandbox-{self.port}.toml"
            fields = self.config.model_dump()
            cfg.write_text("".join(_toml_line(k, v) for k, v in fields.items()))
            argv += ["--config", str(cfg)]
        self.log_path = self.workdir / f"env-server-{self.port}.log"
        log = self.log_path.open("w")
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        try:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
            )
        finally:
            log.close()

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:] if self.log_path else ""
        except OSError:
            return ""

    def start(self, timeout_s: float = 60.0) -> EnvServerProcess:
        """Start the server and wait until /health answers (tries another port if one is taken)."""
        for _attempt in range(3):
            self.proc = self._spawn()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                        return self
                except httpx.HTTPError:
                    time.sleep(0.1)
                if self.proc.poll() is not None:
                    break
            else:
                self.stop()
                raise RuntimeError(f"env server did not answer within {timeout_s:g} s")
            tail = self._log_tail()
            if "address already in use" not in tail.lower():
                raise RuntimeError(f"env server exited ({self.proc.returncode}):\n{tail}")
        raise RuntimeError("env server could not find a free port")

    def kill(self) -> None:
        """SIGKILL: the server dies without closing its sessions (failover tests); their
        mounts and cgroups stay until a server on ``base_dir`` starts, or a reclaim runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, so the server closes every session; SIGKILL if it takes over 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> EnvServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
