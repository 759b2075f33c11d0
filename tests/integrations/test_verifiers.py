"""verifiers' environment API on cheetah's tasks (the ``verifiers`` extra): episodes run by
verifiers' own ``Env.run_episode`` against real OpenAI-compatible servers, graded by cheetah."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from cheetah.inference.local import LocalEngine
from cheetah.inference.server import create_app
from cheetah.model.loading import build_tiny
from cheetah.sandbox.launch import EnvServerProcess
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.loaders import dump_tasks
from tests.inference.conftest import TOKEN, serve_in_thread
from tests.tasks.conftest import bug_task, build_repo

pytest.importorskip(
    "verifiers", reason="the verifiers extra is not installed: pip install -e '.[verifiers]'"
)
import verifiers.v1 as vf
from verifiers.v1.types import content_text

from cheetah.integrations import verifiers_env

FIX = (
    'Fixing the operator.\n<tool name="edit_file"><path>calc/ops.py</path>'
    "<old_str>return a - b</old_str><new_str>return a + b</new_str></tool>"
)


class ScriptedServer:
    """An OpenAI-compatible endpoint replying with ``replies`` in turn; keeps the requests."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.requests = list(replies), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                message = {"role": "assistant", "content": outer.replies.pop(0)}
                data = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RecordingTaskEnv(TaskEnv):
    """The adapter's TaskEnv, keeping each graded step's observation and info."""

    ends: ClassVar[list] = []

    async def step(self, assistant: str, **kw):
        out = await super().step(assistant, **kw)
        if out[2] or out[3]:
            RecordingTaskEnv.ends.append(out)
        return out


@pytest.fixture
def recorded(monkeypatch):
    RecordingTaskEnv.ends = []
    monkeypatch.setattr(verifiers_env, "TaskEnv", RecordingTaskEnv)
    return RecordingTaskEnv.ends


async def run_episodes(config: dict, ctx: vf.ModelContext, n: int) -> list[vf.Episode]:
    """``n`` episodes the way verifiers runs them: the env found by its taskset id."""
    env = vf.load_environment(vf.resolve_env_config(config))
    assert type(env) is verifiers_env.CheetahEnv
    async with env.serving():
        return [await env.run_episode(task, ctx) for task in env.taskset.take(n)]


def conversation(trace: vf.Trace) -> list[tuple[str, str]]:
    return [(m.role, content_text(m.content)) for m in trace.branches[-1].messages]


async def scripted_episode(tmp_path, monkeypatch, replies: list[str], **env) -> tuple:
    """One episode of the calc task (from a task file) against a ``ScriptedServer``."""
    task_file = dump_tasks([bug_task(build_repo(tmp_path / "calc_repo"))], tmp_path / "t.jsonl")
    server = ScriptedServer(replies)
    monkeypatch.setenv("CHEETAH_VF_KEY", "unused")
    ctx = vf.ModelContext(
        model="fake-model",
        client=vf.EvalClientConfig(base_url=server.url, api_key_var="CHEETAH_VF_KEY"),
    )
    taskset = {"id": "cheetah-verifiers", "tasks": str(task_file)}
    try:
        [episode] = await run_episodes({"taskset": taskset, "sandbox": "local", **env}, ctx, 1)
    finally:
        server.close()
    assert episode.ok, episode.errors
    return episode, server


@pytest.fixture(params=["in-process", "env-server"])
def sessions(request, tmp_path):
    """The env config's session knobs: this process's sessions, or a ``cheetah env serve``."""
    if request.param == "in-process":
        yield {}
        return
    server = EnvServerProcess(tmp_path / "env", backend="local", capacity=2)
    server.start()
    try:
        yield {"env_urls": [server.url], "env_token_file": str(server.token_file)}
    finally:
        server.stop()


@pytest.mark.slow  # with the extra, which make test-slow installs
async def test_a_scripted_fix_is_graded_by_cheetah_through_verifiers(
    tmp_path, monkeypatch, recorded, sessions
):
    replies = [FIX, "Fixed: add() adds again."]
    episode, server = await scripted_episode(tmp_path, monkeypatch, replies, **sessions)
    [trace] = episode.traces
    [(obs, reward, terminated, _, info)] = recorded
    assert terminated and reward == pytest.approx(1.0) and info["grade"].correct
    assert trace.reward == pytest.approx(1.0) and trace.rewards["grade"].score == reward
    assert trace.info["graded"] and trace.info["correct"] and trace.info["turns"] == 2
    assert trace.info["stop_reason"] == "finished" and trace.num_turns == 2
    # the second request carried the edit's result as the next user turn
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "calc/ops.py" in content_text(second[3]["content"])
    assert conversation(trace) == [(m["role"], m["content"]) for m in obs.messages]


@pytest.mark.slow
async def test_the_agents_max_turns_is_cheetahs_limit_and_the_episode_is_graded(
    tmp_path, monkeypatch, recorded
):
    agent = {"max_turns": 1}
    episode, server = await scripted_episode(tmp_path, monkeypatch, [FIX], agent=agent)
    [trace] = episode.traces
    [(_, reward, terminated, truncated, info)] = recorded
    assert truncated and not terminated and info["stop_reason"] == "limit"
    assert trace.info["graded"] and trace.info["stop_reason"] == "limit"
    assert trace.rewards["grade"].score == reward == info["grade"].reward
    assert len(server.requests) == 1  # verifiers asked for no second turn


@pytest.mark.slow
async def test_tiny_model_episodes_on_a_bundled_task(monkeypatch, recorded):
    engine = LocalEngine.from_loaded(build_tiny(), max_batch=2)
    url, stop = serve_in_thread(create_app(engine, "tiny", token=TOKEN))
    monkeypatch.setenv("CHEETAH_VF_KEY", TOKEN)
    ctx = vf.ModelContext(
        model="tiny",
        client=vf.EvalClientConfig(base_url=f"{url}/v1", api_key_var="CHEETAH_VF_KEY"),
        sampling=vf.SamplingConfig(max_tokens=16, temperature=1.0),
    )
    config = {
        "taskset": {"id": "cheetah-verifiers", "split": "heldout", "tier": ["line"]},
        "sandbox": "local",
        "agent": {"max_turns": 2},
    }
    try:
        episodes = await run_episodes(config, ctx, n=2)
    finally:
        stop()
        engine.close()
    assert len(episodes) == len(recorded) == 2
    for episode, (obs, reward, _, _, info) in zip(episodes, recorded, strict=True):
        assert episode.ok, episode.errors
        [trace] = episode.traces
        assert trace.info["graded"] and trace.info["task_id"] == episode.task.data.id
        assert 0.0 <= reward <= 1.0 and trace.rewards["grade"].score == info["grade"].reward
        assert trace.info["stop_reason"] == info["stop_reason"] in ("finished", "limit")
        assert 1 <= trace.info["turns"] == trace.num_turns <= 2
        assert conversation(trace) == [(m["role"], m["content"]) for m in obs.messages]
        assert trace.calls and trace.calls[0].usage is not None  # the server's real replies
