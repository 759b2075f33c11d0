"""The OpenAI-compatible server, driven by the official ``openai`` client on a live port."""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from cheetah.cli.serve import add_commands, run_serve
from cheetah.model.chat import prompt_token_ids
from cheetah.model.loading import build_tiny
from tests.inference.conftest import AUTH, TOKEN

MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
]


@pytest.fixture(scope="module")
def client(server_url):
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key=TOKEN, max_retries=0)


@pytest.fixture(scope="module")
def tok():
    return build_tiny().tokenizer


def _chat(client, **kw):
    args = {"model": "tiny", "messages": MESSAGES, "max_tokens": 6, "temperature": 0}
    return client.chat.completions.create(**{**args, **kw})


def test_models_and_health(client, server_url):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    health = httpx.get(f"{server_url}/health").json()
    assert health["status"] == "ok" and health["max_context"] == 2048


def test_chat_completion_returns_text_ids_logprobs_and_version(client, tok):
    resp = _chat(client, logprobs=True, top_logprobs=2)
    choice = resp.choices[0]
    assert choice.prompt_token_ids == prompt_token_ids(MESSAGES, tok)
    assert len(choice.token_ids) == 6 == resp.usage.completion_tokens
    assert choice.message.content == tok.decode(choice.token_ids, skip_special_tokens=True)
    assert [t.token for t in choice.logprobs.content] == [tok.decode([i]) for i in choice.token_ids]
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in choice.logprobs.content)
    assert choice.logprobs.content[0].top_logprobs[0].logprob == choice.logprobs.content[0].logprob
    assert choice.finish_reason == "length"
    assert resp.policy_version >= 0


def test_streamed_chat_matches_the_plain_answer(client):
    plain = _chat(client).choices[0]
    chunks = list(_chat(client, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    ids = [i for c in chunks for i in (getattr(c.choices[0], "token_ids", None) or [])]
    assert text == plain.message.content
    assert ids == plain.token_ids
    assert chunks[0].choices[0].prompt_token_ids == plain.prompt_token_ids
    assert chunks[-1].choices[0].finish_reason == "length"


def test_assistant_token_ids_enter_the_prompt_verbatim(client, tok):
    sampled = tok.encode("Hel") + tok.encode("lo") + [tok.eos_token_id]
    history = [
        *MESSAGES,
        {"role": "assistant", "content": "Hello", "token_ids": sampled},
        {"role": "user", "content": "go on"},
    ]
    resp = _chat(client, messages=history)
    prompt = resp.choices[0].prompt_token_ids
    head = prompt_token_ids(MESSAGES, tok)
    assert prompt[: len(head) + len(sampled)] == head + sampled


def test_text_content_parts_read_as_plain_text(client):
    parts = [{"type": "text", "text": "List the "}, {"type": "text", "text": "files."}]
    plain = _chat(client).choices[0]
    resp = _chat(client, messages=[MESSAGES[0], {"role": "user", "content": parts}])
    assert resp.choices[0].prompt_token_ids == plain.prompt_token_ids


def test_completions_take_text_or_token_ids(client, tok):
    by_text = client.completions.create(
        model="tiny", prompt="def main():", max_tokens=5, temperature=0, logprobs=1
    )
    ids = tok("def main():", add_special_tokens=False)["input_ids"]
    by_ids = client.completions.create(
        model="tiny", prompt=ids, max_tokens=5, temperature=0, logprobs=0
    )
    assert by_text.choices[0].prompt_token_ids == ids
    assert by_text.choices[0].token_ids == by_ids.choices[0].token_ids
    assert by_text.choices[0].text == by_ids.choices[0].text
    lp = by_text.choices[0].logprobs
    assert len(lp.token_logprobs) == 5 and len(lp.top_logprobs[0]) == 1
    assert lp.text_offset[0] == 0


def test_streamed_completion_matches_the_plain_one(client):
    plain = client.completions.create(model="tiny", prompt="x = ", max_tokens=5, temperature=0)
    chunks = list(
        client.completions.create(
            model="tiny", prompt="x = ", max_tokens=5, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == plain.choices[0].text


def test_bad_requests_are_4xx_with_a_message_and_the_server_stays_up(client, server_url):
    cases = [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 2.0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 9000}, "context"),
        ({"n": 2}, "n must be 1"),
        ({"messages": [{"role": "user", "content": "hi " * 4000}]}, "context"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ]
    for kw, needle in cases:
        with pytest.raises(openai.BadRequestError, match=needle):
            _chat(client, **kw)
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.completions.create(model="tiny", prompt=[10**9], max_tokens=2)
    assert httpx.get(f"{server_url}/health").json()["status"] == "ok"
    assert len(_chat(client).choices[0].token_ids) == 6


def test_weights_reload_from_a_checkpoint_and_bump_the_version(client, server_url, tmp_path):
    before = _chat(client).choices[0].token_ids
    version = httpx.get(f"{server_url}/health").json()["policy_version"]
    other = build_tiny(seed=5)
    other.model.save_pretrained(tmp_path / "ckpt")
    body = {"path": str(tmp_path / "ckpt")}
    resp = httpx.post(f"{server_url}/v1/weights", json=body, headers=AUTH)
    assert resp.status_code == 200 and resp.json()["policy_version"] == version + 1
    after = _chat(client)
    assert after.policy_version == version + 1
    assert after.choices[0].token_ids != before

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"corrupt" * 100)
    for path in (tmp_path / "bad", tmp_path / "missing"):
        resp = httpx.post(f"{server_url}/v1/weights", json={"path": str(path)}, headers=AUTH)
        assert resp.status_code == 400
        assert str(path) in resp.json()["error"]["message"]
    assert httpx.get(f"{server_url}/health").json()["policy_version"] == version + 1


def test_serve_command_parses_and_rejects_an_unknown_model(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="cheetah")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--model", str(tmp_path / "nope"), "--port", "9"])
    assert (args.command, args.host, args.port) == ("serve", "127.0.0.1", 9)
    assert args.func(args) == 2 and args.func is run_serve
    assert "no model at" in capsys.readouterr().err


def test_cheetah_serve_starts_a_server_that_answers(tmp_path):
    """With --token-file: the token guards every route but /health and is never printed."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (
        "import argparse, sys\n"
        "from cheetah.cli.serve import add_commands\n"
        "p = argparse.ArgumentParser()\n"
        "add_commands(p.add_subparsers())\n"
        "a = p.parse_args(sys.argv[1:])\n"
        "sys.exit(a.func(a))\n"
    )
    argv = ["serve", "--model", "tiny", "--port", str(port), "--token-file", str(token_file),
            "--name", "served-id"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        # A hang guard (a server that exits fails at once): the start (torch, transformers, the
        # model) took 17 s on a busy 2-core machine.
        deadline = time.monotonic() + 240
        while True:
            try:
                health = httpx.get(f"{url}/health", timeout=1).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "cheetah serve did not come up"
                time.sleep(0.2)
        assert health["model"] == "served-id"  # --name is the id served, as its help says
        assert httpx.get(f"{url}/v1/models").status_code == 401
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["served-id"]
        assert len(_chat(client).choices[0].token_ids) == 6
    finally:
        proc.terminate()
        proc.wait(timeout=120)  # a hang guard
    err = proc.stderr.read().decode()
    assert str(token_file) in err and TOKEN not in err
    assert "(model 'served-id')" in err


def test_serve_name_defaults_to_the_model_s_own_name_as_its_help_says(capsys):
    import argparse

    from cheetah.cli.serve import _load, add_commands

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_commands(sub)
    help_text = " ".join(sub.choices["serve"].format_help().split())
    assert "default: the model's own name, not the --model value" in help_text
    args = parser.parse_args(["serve", "--model", "tiny"])
    engine, name, _, _ = _load(args)
    try:
        assert name == "tiny"
    finally:
        engine.close()


async def test_concurrent_clients_are_batched_and_get_their_own_answers(server_url, client):
    questions = [f"Question number {i}?" for i in range(12)]

    def body(q):
        return {
            "model": "tiny",
            "messages": [{"role": "user", "content": q}],
            "max_tokens": 8,
            "temperature": 0,
        }

    async with httpx.AsyncClient(base_url=server_url, timeout=60, headers=AUTH) as http:
        replies = await asyncio.gather(
            *[http.post("/v1/chat/completions", json=body(q)) for q in questions]
        )
    assert all(r.status_code == 200 for r in replies)
    for q, r in zip(questions[:3], replies[:3], strict=True):
        alone = _chat(client, messages=[{"role": "user", "content": q}], max_tokens=8)
        assert r.json()["choices"][0]["token_ids"] == alone.choices[0].token_ids


async def test_the_harness_openai_policy_gets_engine_ids_from_this_server(server_url, tok):
    from cheetah.harness.openai_policy import OpenAIPolicy
    from cheetah.harness.trajectory import Message

    policy = OpenAIPolicy(
        f"{server_url}/v1", model="tiny", temperature=0.0, max_tokens=5, api_key=TOKEN
    )
    messages = [Message(role="user", content="List the files.")]
    gen = await policy.generate(messages)
    assert gen.prompt_token_ids == prompt_token_ids(messages, tok)
    assert gen.token_ids is not None and len(gen.token_ids) == len(gen.logprobs) == 5
    assert gen.text == tok.decode(gen.token_ids, skip_special_tokens=True)
    assert gen.policy_version is not None


def test_cheetah_agent_sends_the_token_from_its_file_or_the_environment(
    server_url, tmp_path, monkeypatch, capsys
):
    from cheetah.cli.agent import add_commands as add_agent

    parser = argparse.ArgumentParser(prog="cheetah")
    add_agent(parser.add_subparsers(dest="command"))
    (tmp_path / "token").write_text(TOKEN)
    argv = ["agent", "say hi", "--repo", str(tmp_path), "--model", f"{server_url}/v1"]
    argv += ["--max-turns", "1", "--max-new-tokens", "2", "--quiet"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("CHEETAH_API_TOKEN", raising=False)
    args = parser.parse_args(argv)
    assert args.func(args) == 1 and "answered 401" in capsys.readouterr().err
    args = parser.parse_args([*argv, "--token-file", str(tmp_path / "token")])
    assert args.func(args) == 3  # answered: its 2 tokens were cut, a limit (exit 3)
    assert "reply cut at max_new_tokens=2" in capsys.readouterr().err
    monkeypatch.setenv("CHEETAH_API_TOKEN", TOKEN)
    args = parser.parse_args(argv)
    assert args.func(args) == 3


async def test_the_agent_s_streamed_reply_records_what_the_plain_one_does(server_url):
    """``OpenAIPolicy.generate_streaming`` over cheetah's SSE: the same text, token ids,
    logprobs and prompt ids as the plain request, so a streamed run trains the same."""
    from cheetah.harness.openai_policy import OpenAIPolicy
    from cheetah.harness.trajectory import Message

    policy = OpenAIPolicy(f"{server_url}/v1", "tiny", max_tokens=6, api_key=TOKEN)
    messages = [Message(role="user", content="Fix the bug.")]
    plain = await policy.generate(messages)
    pieces: list[str] = []
    streamed = await policy.generate_streaming(messages, pieces.append)
    assert "".join(pieces) == streamed.text == plain.text and len(pieces) > 1
    for field in ("token_ids", "prompt_token_ids", "finish_reason", "completion_tokens",
                  "prompt_tokens", "policy_version", "max_new_tokens"):  # fmt: skip
        assert getattr(streamed, field) == getattr(plain, field), field
    assert streamed.logprobs == pytest.approx(plain.logprobs, abs=1e-5)
