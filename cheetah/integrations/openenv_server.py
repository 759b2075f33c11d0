"""cheetah's tasks as an OpenEnv environment: any OpenEnv client (TRL's examples, a
hand-written loop) runs graded, sandboxed coding episodes over its WebSocket protocol.

OpenEnv (the ``openenv`` package, 0.10) serves an ``Environment`` subclass with its own
FastAPI app (``create_app``): each WebSocket connection to ``/ws`` gets its own instance
from a factory, runs its ``reset``/``step`` on a worker thread, and closes it when the
socket goes. So the adapter is that subclass over ``tasks.gym.TaskEnv``, one episode per
connection:

- ``reset(task_id=...)`` opens the task (one of the tasks the server was started with; an
  unknown id is an error naming it; without one, a task is drawn with ``seed``) and returns
  the system prompt and query as chat messages (``new`` and ``messages``);
- ``step(CheetahAction(message=...))`` is the model's whole message (cheetah parses its tool
  calls); the observation carries the tool results, and at the end ``done``, the reward
  (the grade's) and in ``metadata`` the stop reason, ``truncated``, turns and the grade.

Every connection's episode runs on one event loop thread shared by the app, over one
``TaskSessionOpener`` (isolated sessions here, or env servers through the fleet), so
concurrent clients share the sandbox's limits. The app is bounded and authenticated where
OpenEnv's is not: it sits behind ``core.http_gate.HttpGate`` like cheetah's other servers
(the Host check on loopback, a bearer token on every route and on ``/ws``, its only
WebSocket; a body cap), with ``/docs``, ``/redoc`` and ``/openapi.json`` removed, a cap on
concurrent episodes, message sizes bounded by the action's fields, and OpenEnv's
"production" mode (no stateless ``/reset``/``/step`` routes that would open a session per
request). A WebSocket's messages are read as they arrive (``core.ws_drop``), so a client
that goes away mid-step is seen at once: its step is cancelled and its episode closed (the
session, and so its running commands, killed), instead of running on to the command's end.

Deliberately left out: the HTTP-only routes, OpenEnv's MCP tool mode (cheetah's tools are
called in its own XML format, inside the message; its ``/mcp`` WebSocket is closed by the
gate), its web UI (``create_fastapi_app``, so ``ENABLE_WEB_INTERFACE`` does not add one),
Docker images, and the ``openenv`` client classes (``GenericEnvClient`` reads these
observations as they are).
``openenv`` pins ``mcp<2`` (through fastmcp) and verifiers 0.4 pins ``mcp==2``: the two
extras cannot share one environment, so ``make test-openenv`` uses its own venv.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import threading
from collections.abc import Callable, Collection, Coroutine
from pathlib import Path
from typing import Any

from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)
from pydantic import Field

from cheetah.core.http_gate import (
    HttpGate,
    SettingError,
    loopback_hosts,
    read_token,
    write_token,
)
from cheetah.core.ws_drop import DropWatch, on_drop
from cheetah.harness.loop import AgentLimits
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener

MAX_MESSAGE_CHARS = 200_000
MAX_BODY_BYTES = 4 * MAX_MESSAGE_CHARS  # the HTTP routes' bodies; also uvicorn's ws_max_size
DOCS_ROUTES = {"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}


class CheetahAction(Action):
    """The model's whole message (its tool calls inside, in cheetah's format)."""

    message: str = Field(max_length=MAX_MESSAGE_CHARS)
    token_ids: list[int] | None = Field(None, max_length=MAX_MESSAGE_CHARS)


class CheetahObservation(Observation):
    """Chat messages: ``new`` since the model's last message, ``messages`` all of them."""

    new: list[dict[str, str]] = Field(default_factory=list)
    messages: list[dict[str, str]] = Field(default_factory=list)


class CheetahState(State):
    task_id: str | None = None


class _Shared:
    """One event loop thread and one ``TaskSessionOpener`` for every connection of an app."""

    def __init__(self, make_sessions: Callable[[], TaskSessionOpener]) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="cheetah-env").start()
        self.sessions: TaskSessionOpener = self.call(self._make(make_sessions))

    @staticmethod
    async def _make(make_sessions: Callable[[], TaskSessionOpener]) -> TaskSessionOpener:
        return make_sessions()

    def call(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


class CheetahEnvironment(Environment[CheetahAction, CheetahObservation, CheetahState]):
    """One connection's episodes (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        shared: _Shared,
        tasks: dict[str, Task],
        limits: AgentLimits | None = None,
        grader: GraderConfig | None = None,
    ) -> None:
        super().__init__()
        self.shared, self.tasks = shared, tasks
        self.env = TaskEnv(shared.sessions, limits, grader)
        self._state = CheetahState()
        self._running: Any = None  # the concurrent future of the reset or step under way
        self._dropped = self._watched = False

    async def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """``coro`` on the shared loop, awaited on the app's, where the connection's handler
        runs: the first call asks ``DropWatch`` to ``drop`` this episode if the client goes."""
        if not self._watched:
            self._watched = on_drop(self.drop)
        self._running = asyncio.run_coroutine_threadsafe(coro, self.shared.loop)
        try:
            return await asyncio.wrap_future(self._running)
        except asyncio.CancelledError:
            if self._dropped:
                raise ConnectionError("the client went away; the episode is closed") from None
            raise
        finally:
            self._running = None

    def drop(self) -> None:
        """The client went away: cancel the reset or step under way and close the episode
        (its session, so its running commands are killed). Returns at once."""
        self._dropped = True
        if self._running is not None:
            self._running.cancel()
        asyncio.run_coroutine_threadsafe(self.env.close(), self.shared.loop)

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **_: Any,
    ) -> CheetahObservation:
        if task_id is None:
            task_id = random.Random(seed).choice(sorted(self.tasks))
        task = self.tasks.get(task_id)
        if task is None:
            raise ValueError(f"no task {task_id!r} on this server ({len(self.tasks)} tasks)")
        obs, info = await self._run(self.env.reset(task))
        self._state = CheetahState(episode_id=episode_id or task_id, task_id=task_id)
        return CheetahObservation(new=obs.new, messages=obs.messages, metadata=info)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kw: Any
    ) -> CheetahObservation:
        """OpenEnv calls ``reset_async`` and ``step_async``; these complete its interface."""
        return self.shared.call(self.reset_async(seed, episode_id, **kw))

    def step(
        self, action: CheetahAction, timeout_s: float | None = None, **_: Any
    ) -> CheetahObservation:
        return self.shared.call(self.step_async(action))

    async def step_async(
        self, action: CheetahAction, timeout_s: float | None = None, **_: Any
    ) -> CheetahObservation:
        obs, reward, terminated, truncated, info = await self._run(
            self.env.step(action.message, token_ids=action.token_ids)
        )
        self._state.step_count += 1
        meta: dict[str, Any] = {"task_id": info["task_id"], "truncated": truncated}
        if "grade" in info:
            meta |= {
                "stop_reason": info["stop_reason"],
                "stop_detail": info["stop_detail"],
                "turns": info["turns"],
                "tools_s": info["tools_s"],
                "grade": info["grade"].model_dump(mode="json", exclude={"diff"}),
            }
        return CheetahObservation(
            new=obs.new,
            messages=obs.messages,
            done=terminated or truncated,
            reward=reward,
            metadata=meta,
        )

    @property
    def state(self) -> CheetahState:
        return self._state

    def close(self) -> None:
        self.shared.call(self.env.close())


def cheetah_app(
    tasks: list[Task],
    make_sessions: Callable[[], TaskSessionOpener],
    token: str,
    *,
    max_episodes: int = 8,
    limits: AgentLimits | None = None,
    grader: GraderConfig | None = None,
    allowed_hosts: Collection[str] | None = loopback_hosts("127.0.0.1"),
) -> HttpGate:
    """The OpenEnv app over ``tasks`` (an ASGI app; serve it with uvicorn) behind
    ``HttpGate``; ``allowed_hosts`` None answers any Host header (a server the token guards)."""
    if not tasks:
        raise ValueError("an OpenEnv server needs at least one task")
    by_id = {t.id: t for t in tasks}
    shared = _Shared(make_sessions)

    def factory() -> CheetahEnvironment:
        return CheetahEnvironment(shared, by_id, limits, grader)

    app = create_fastapi_app(
        factory,
        CheetahAction,
        CheetahObservation,
        env_name="cheetah",
        max_concurrent_envs=max_episodes,
        state_cls=CheetahState,
        mode="production",
    )
    app.router.routes[:] = [r for r in app.router.routes if r.path not in DOCS_ROUTES]
    app.docs_url = app.redoc_url = app.openapi_url = None
    return HttpGate(
        DropWatch(app),
        token=token,
        max_body_bytes=MAX_BODY_BYTES,
        open_routes=(),
        allowed_hosts=allowed_hosts,
        websocket_paths=("/ws",),
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m cheetah.integrations.openenv_server --tasks benchmark``."""
    import uvicorn

    from cheetah.tasks.loaders import load_tasks, select_tasks
    from cheetah.tasks.session import local_sessions

    ap = argparse.ArgumentParser(description="Serve cheetah's tasks as an OpenEnv environment.")
    ap.add_argument("--tasks", default="benchmark", help="task file or bundled set")
    ap.add_argument("--split", choices=["train", "heldout"], default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8010)
    ap.add_argument("--max-episodes", type=int, default=8, help="concurrent connections")
    ap.add_argument(
        "--token-file",
        type=Path,
        help="file holding the bearer token (default: a new one, written to "
        "$CHEETAH_HOME/openenv.token or ./openenv.token)",
    )
    args = ap.parse_args(argv)
    tasks = select_tasks(load_tasks(args.tasks), split=args.split)
    try:
        token = server_token(args.token_file)
    except SettingError as e:
        raise SystemExit(f"openenv server: {e}") from None
    app = cheetah_app(
        tasks,
        lambda: local_sessions("isolated"),
        token,
        max_episodes=args.max_episodes,
        allowed_hosts=loopback_hosts(args.host),
    )
    print(f"serving {len(tasks)} tasks as OpenEnv at ws://{args.host}:{args.port}/ws")
    uvicorn.run(app, host=args.host, port=args.port, ws_max_size=MAX_BODY_BYTES)


def server_token(token_file: Path | None) -> str:
    """The token of ``token_file`` when it exists; else a new one, written there (default
    ``$CHEETAH_HOME/openenv.token`` or ``./openenv.token``) by ``write_token``: mode 0600,
    never through a link planted at that path."""
    if token_file is not None and token_file.exists():
        return read_token(token_file)
    token = secrets.token_urlsafe(32)
    path = token_file or Path(os.environ.get("CHEETAH_HOME", ".")) / "openenv.token"
    write_token(path, token)
    print(f"bearer token written to {path}")
    return token


if __name__ == "__main__":
    main()
