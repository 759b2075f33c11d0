"""llama.cpp behind cheetah: a GGUF export served by llama.cpp answers the agent's policy,
behind a token; bad settings are refused before anything starts."""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest

from cheetah.harness.policy import PolicyError
from cheetah.harness.policy_spec import close_policy, policy_from_spec
from cheetah.harness.trajectory import Message
from cheetah.inference.llama_cpp_server import find_server
from cheetah.model.gguf_export import export_gguf
from cheetah.model.loading import build_tiny
from tests.test_cli import cheetah


def test_bad_settings_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(PolicyError, match=r"not a \.gguf file"):
        policy_from_spec(f"llama.cpp:{tmp_path / 'model.bin'}")
    r = cheetah("serve", "--engine", "llama.cpp", "--model", tmp_path / "m.gguf")
    assert r.returncode == 2 and "needs --token-file" in r.stderr


def test_the_served_model_id_is_the_alias_or_the_file_name(tmp_path, monkeypatch):
    from cheetah.inference import llama_cpp_server

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    for command, flag in ((["llama-server"], "--alias"), ([sys.executable, "-m", "llama_cpp.server"], "--model_alias")):  # fmt: skip
        monkeypatch.setattr(llama_cpp_server, "find_server", lambda c=command: c)
        named = llama_cpp_server.LlamaCppServer(gguf, alias="served-id")
        assert (
            named.name == "served-id"
            and named.command[named.command.index(flag) + 1] == "served-id"
        )
        plain = llama_cpp_server.LlamaCppServer(gguf)
        assert plain.name == "m" and plain.command[plain.command.index(flag) + 1] == "m"


@pytest.mark.skipif(find_server() is None, reason="llama.cpp is not installed (make bench-llama)")
def test_a_gguf_export_answers_through_llama_cpp(tmp_path):
    tiny = build_tiny()
    gguf = export_gguf(tiny.model, tiny.tokenizer, tmp_path / "tiny.gguf", "q8_0")
    policy = policy_from_spec(f"llama.cpp:{gguf}", max_tokens=8)
    try:
        server = policy.server
        out = asyncio.run(policy.generate([Message(role="user", content="Fix the bug.")]))
        assert out.text and policy.name == "llama.cpp:tiny"
        wrong = httpx.get(f"{server.url}/models", headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401
        proc = server.proc
    finally:
        close_policy(policy)
    assert proc.poll() is not None  # the server is gone with the policy
