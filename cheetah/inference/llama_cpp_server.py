"""llama.cpp as a child process: a GGUF file (the default model, or ``cheetah export --gguf``)
served over its OpenAI-compatible API, for ``cheetah agent --model llama.cpp:FILE`` and
``cheetah serve --engine llama.cpp``.

It starts llama.cpp's C++ ``llama-server`` when one is found (``$LLAMA_SERVER``, else on
``PATH``: parallel slots with continuous batching, ``--parallel``), else the Python server
of ``llama-cpp-python`` (``python -m llama_cpp.server``: one request at a time, with its
prompt cache on), bound to 127.0.0.1 behind a bearer token (both servers take an API key),
and waits until ``/v1/models`` answers. ``stop`` ends it (the process group: the C++
server's threads, the Python server's uvicorn). OpenMP threads wait passively
(``OMP_WAIT_POLICY=passive``): spinning made llama.cpp 5-30x slower on a busy machine
(BENCHMARKS.md).

Deliberately left out: downloading or building llama.cpp (``make bench-llama`` builds
llama-cpp-python from source; BENCHMARKS.md says with which flags and why), GPU offload,
and any model but a local GGUF file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from cheetah.core.ports import free_port


class LlamaCppError(RuntimeError):
    """llama.cpp is not installed, or its server did not start (the message says which)."""


def find_server() -> list[str] | None:
    """The command that starts a llama.cpp server, or None when neither kind is installed."""
    binary = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    if binary:
        return [binary]
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is not None:
        return [sys.executable, "-m", "llama_cpp.server"]
    return None


class LlamaCppServer:
    """One llama.cpp server process over ``gguf`` (see the module docstring)."""

    def __init__(
        self,
        gguf: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        ctx: int = 8192,
        parallel: int = 4,
        threads: int | None = None,
        api_key: str | None = None,
        alias: str | None = None,
    ) -> None:
        """``alias``: the model id the server reports and answers to (default: the file's
        name without ``.gguf``); ``name`` is that id either way."""
        gguf = Path(gguf).expanduser()
        if not gguf.is_file() or gguf.suffix != ".gguf":
            raise LlamaCppError(f"{gguf}: not a .gguf file")
        command = find_server()
        if command is None:
            raise LlamaCppError(
                "llama.cpp is not installed: set $LLAMA_SERVER to a llama-server binary, "
                "or `make bench-llama` (builds llama-cpp-python from source)"
            )
        self.host, self.port = host, port or free_port(host)
        self.api_key: str | None = api_key or secrets.token_urlsafe(24)
        threads = threads or os.cpu_count() or 1
        if command[-1] == "llama_cpp.server":
            args = [
                "--model", str(gguf), "--host", host, "--port", str(self.port),
                "--n_ctx", str(ctx), "--n_threads", str(threads),
                "--n_threads_batch", str(threads), "--cache", "true",
                "--api_key", self.api_key, "--model_alias", alias or gguf.stem,
            ]  # fmt: skip
        else:
            args = [
                "-m", str(gguf), "--host", host, "--port", str(self.port),
                "-c", str(ctx * parallel), "--parallel", str(parallel), "--cont-batching",
                "-t", str(threads), "-tb", str(threads), "--api-key", self.api_key,
                "--alias", alias or gguf.stem,
            ]  # fmt: skip
        self.command = [*command, *args]
        self.name = alias or gguf.stem
        self.proc: subprocess.Popen | None = None

    @classmethod
    def from_command(cls, command: list[str], name: str, host: str = "127.0.0.1") -> LlamaCppServer:
        """A server run as ``command`` says (a benchmark's own model and flags), with only
        ``--host`` and a free ``--port`` added: no API key, so for loopback measurements."""
        server = cls.__new__(cls)
        server.host, server.port, server.api_key = host, free_port(host), None
        server.command = [*command, "--host", host, "--port", str(server.port)]
        server.name, server.proc = name, None
        return server

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 600.0, log: Path | None = None) -> LlamaCppServer:
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            self.command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LlamaCppError(
                    f"llama.cpp exited with status {self.proc.returncode} while starting "
                    f"({' '.join(self.command[:3])} ...)" + (f"; see {log}" if log else "")
                )
            try:
                if httpx.get(f"{self.url}/models", headers=headers, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise LlamaCppError(f"llama.cpp did not answer within {timeout_s:.0f} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
