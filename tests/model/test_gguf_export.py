"""A checkpoint written as GGUF and read back: same weights, same tokens, same greedy text."""

from __future__ import annotations

import pytest
import torch

from cheetah.model.gguf_export import GgufExportError, export_gguf
from cheetah.model.loading import build_tiny, load_model
from tests.test_cli import cheetah

PROMPTS = ["def add(a, b):", "Fix the bug in calc/ops.py", "<|im_start|>user\nhi<|im_end|>"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


def greedy(loaded, text: str) -> list[int]:
    ids = loaded.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return loaded.model.generate(**ids, max_new_tokens=10, do_sample=False)[0].tolist()


def test_an_f32_export_reads_back_as_the_same_model(tiny, tmp_path):
    path = export_gguf(tiny.model, tiny.tokenizer, tmp_path / "tiny.gguf", "f32")
    back = load_model(path)
    theirs = back.model.state_dict()
    for name, w in tiny.model.state_dict().items():
        assert torch.equal(w, theirs[name]), name  # Q/K permuted on the way out and back
    for text in PROMPTS:
        assert tiny.tokenizer(text)["input_ids"] == back.tokenizer(text)["input_ids"], text
        assert greedy(tiny, text) == greedy(back, text), text
    assert back.tokenizer.chat_template == tiny.tokenizer.chat_template
    assert back.tokenizer.eos_token_id == tiny.tokenizer.eos_token_id


def test_q8_0_is_close_and_half_precision_is_smaller(tiny, tmp_path):
    f32 = export_gguf(tiny.model, tiny.tokenizer, tmp_path / "a.gguf", "f32")
    q8 = export_gguf(tiny.model, tiny.tokenizer, tmp_path / "b.gguf", "q8_0")
    assert q8.stat().st_size < f32.stat().st_size / 2.5
    back = load_model(q8).model.state_dict()
    for name, w in tiny.model.state_dict().items():
        err = (w - back[name]).abs().max().item()
        assert err <= w.abs().max().item() / 100, (name, err)  # 8-bit blocks: under 1% of range
    assert not list(tmp_path.glob("*.partial"))


def test_other_architectures_are_refused_by_name(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(GgufExportError, match="'gpt2'"):
        export_gguf(model, None, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_cheetah_export_gguf(tmp_path):
    out = tmp_path / "tiny.gguf"
    r = cheetah("export", "--gguf", "tiny", "--gguf-type", "q8_0", "--out", out)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and "llama.cpp" in r.stdout
    r = cheetah("export", "--gguf", "tiny", "--out", tmp_path / "tiny.bin")
    assert r.returncode == 2 and "should end in .gguf" in r.stderr
    r = cheetah("export", "--gguf", "/nonexistent/model", "--out", out)
    assert r.returncode == 2 and "/nonexistent/model" in r.stderr


@pytest.mark.slow  # needs llama-cpp-python (the bench extra) and writes the default model
def test_llama_cpp_runs_an_export_as_the_checkpoint_does(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    loaded = load_model("default")
    path = export_gguf(loaded.model, loaded.tokenizer, tmp_path / "default.gguf", "f32")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False)
    for text in PROMPTS[:2]:
        ids = loaded.tokenizer(text)["input_ids"]
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids
        theirs = []
        for token in llm.generate(ids, temp=0.0, top_k=1):
            theirs.append(token)
            if len(theirs) == 10:
                break
        assert greedy(loaded, text)[len(ids) :] == theirs, text
