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
OpenEnv's is not: a bearer token on every route and the WebSocket (``Authorization``
header, compared in constant time), a cap on concurrent episodes, message sizes bounded by
the action's fields, and OpenEnv's "production" mode (no stateless ``/reset``/``/step``
routes that would open a session per request).

Deliberately left out: the HTTP-only routes, OpenEnv's MCP tool mode (cheetah's tools are
called in its own XML format, inside the message), Docker images, and the ``openenv``
client classes (``GenericEnvClient`` reads these observations as they are).
``openenv`` pins ``mcp<2`` (through fastmcp) and verifiers 0.4 pins ``mcp==2``: the two
extras cannot share one environment, so ``make test-openenv`` uses its own venv.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import random
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field

from cheetah.harness.loop import AgentLimits
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener

MAX_MESSAGE_CHARS = 200_000


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

    def reset(
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
        obs, info = self.shared.call(self.env.reset(task))
        self._state = CheetahState(episode_id=episode_id or task_id, task_id=task_id)
        return CheetahObservation(new=obs.new, messages=obs.messages, metadata=info)

    def step(
        self, action: CheetahAction, timeout_s: float | None = None, **_: Any
    ) -> CheetahObservation:
        obs, reward, terminated, truncated, info = self.shared.call(
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


class _BearerToken:
    """ASGI middleware: every HTTP request and WebSocket must bring ``Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong token\n"})
                return
        await self.app(scope, receive, send)


def cheetah_app(
    tasks: list[Task],
    make_sessions: Callable[[], TaskSessionOpener],
    token: str,
    *,
    max_episodes: int = 8,
    limits: AgentLimits | None = None,
    grader: GraderConfig | None = None,
) -> Any:
    """The OpenEnv app over ``tasks`` (an ASGI app; serve it with uvicorn)."""
    if not tasks:
        raise ValueError("an OpenEnv server needs at least one task")
    if len(token) < 16:
        raise ValueError("the bearer token must be at least 16 characters")
    by_id = {t.id: t for t in tasks}
    shared = _Shared(make_sessions)

    def factory() -> CheetahEnvironment:
        return CheetahEnvironment(shared, by_id, limits, grader)

    app = create_app(
        factory,
        CheetahAction,
        CheetahObservation,
        env_name="cheetah",
        max_concurrent_envs=max_episodes,
        state_cls=CheetahState,
        mode="production",
    )
    return _BearerToken(app, token)


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
    if args.token_file and args.token_file.exists():
        token = args.token_file.read_text().strip()
    else:
        token = secrets.token_urlsafe(32)
        path = args.token_file or Path(os.environ.get("CHEETAH_HOME", ".")) / "openenv.token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        print(f"bearer token written to {path}")
    app = cheetah_app(
        tasks, lambda: local_sessions("isolated"), token, max_episodes=args.max_episodes
    )
    print(f"serving {len(tasks)} tasks as OpenEnv at ws://{args.host}:{args.port}/ws")
    uvicorn.run(app, host=args.host, port=args.port, ws_max_size=4 * MAX_MESSAGE_CHARS)


if __name__ == "__main__":
    main()
