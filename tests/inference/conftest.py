"""The tiny random model, one engine per test module, and a live server on a free port
(started with ``TOKEN``: its clients send it, as ``AUTH`` for plain httpx calls)."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from cheetah.inference.local import LocalEngine
from cheetah.inference.server import create_app
from cheetah.model.loading import LoadedModel, build_tiny

TOKEN = "test-token-" + "t" * 21
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    return build_tiny()


@pytest.fixture
def engine(tiny: LoadedModel) -> Iterator[LocalEngine]:
    # its own copy: load_weights writes into the engine's model, and ``tiny`` is shared
    eng = LocalEngine(copy.deepcopy(tiny.model), tiny.tokenizer, max_batch=8)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A cheetah server over its own tiny engine (weights may change: tests reload them)."""
    engine = LocalEngine.from_loaded(build_tiny(), max_batch=8)
    url, stop = serve_in_thread(create_app(engine, "tiny", token=TOKEN))
    yield url
    stop()
    engine.close()


def serve_in_thread(app: object) -> tuple[str, object]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return f"http://127.0.0.1:{port}", stop
