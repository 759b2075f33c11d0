"""Fixtures for the sandbox suite: an isolated in-process env and real env server processes.

Isolation needs bubblewrap and (for overlay and cgroups) root; `make test` installs
bubblewrap. Where the host cannot isolate, these tests skip and say why.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cheetah.sandbox.capabilities import detect
from cheetah.sandbox.config import SandboxConfig

BIN = Path(sys.executable).parent
LIMITS = {
    "memory_mb": 256,
    "pids_max": 64,
    "cpus": 1.0,
    "cpu_time_s": 3,
    "nproc": 2000,
    "file_size_mb": 32,
    "disk_mb": 64,
    "tmp_mb": 32,
}


def _caps():
    return detect(SandboxConfig().uid, SandboxConfig().gid)


needs_isolation = pytest.mark.skipif(not _caps().isolated, reason=_caps().describe())


@pytest.fixture
def small_config() -> SandboxConfig:
    return SandboxConfig(**LIMITS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProc:
    def __init__(
        self,
        tmp: Path,
        backend: str = "isolated",
        capacity: int = 64,
        idle_timeout_s: float = 1800.0,
        reap_interval_s: float = 30.0,
        token: str | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token or secrets.token_hex(16)
        self.token_file = tmp / f"token-{self.port}"
        self.token_file.write_text(self.token)
        config = tmp / f"sandbox-{self.port}.toml"
        config.write_text("".join(f"{k} = {v}\n" for k, v in LIMITS.items()))
        self.proc = subprocess.Popen(
            [
                BIN / "cheetah",
                "env",
                "serve",
                "--port",
                str(self.port),
                "--token-file",
                str(self.token_file),
                "--backend",
                backend,
                "--capacity",
                str(capacity),
                "--idle-timeout-s",
                str(idle_timeout_s),
                "--reap-interval-s",
                str(reap_interval_s),
                "--config",
                str(config),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"env server exited: {self.proc.stdout.read()}")
        raise RuntimeError("env server did not come up in 30 s")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def env_server(tmp_path):
    servers: list[ServerProc] = []

    def start(**kw) -> ServerProc:
        servers.append(ServerProc(tmp_path, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()
