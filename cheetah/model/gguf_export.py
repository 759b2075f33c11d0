"""Write a Llama-family checkpoint (the default model, anything trained from it) as a GGUF file.

GGUF is what llama.cpp, ollama and LM Studio run; the default model ships as one. The file
holds three things, all built here with the ``gguf`` package's writer:

- the hyperparameters under ``llama.*`` from the HF config (layers, heads, KV heads, widths,
  RoPE base and dimension, RMS-norm epsilon, context length, vocabulary size);
- the tokenizer as llama.cpp reads a byte-level BPE one (``tokenizer.ggml.model = gpt2``):
  every token by id with its type (control for special tokens), the merges from
  ``tokenizer.json``, the special ids and the chat template. ``tokenizer.ggml.pre`` (the
  pre-tokenizer llama.cpp applies) cannot be derived from the files; it is taken from a
  reference GGUF whose vocabulary is the same (by default the shipped model's, ``smollm``),
  else ``default``;
- the tensors, renamed with ``gguf.TensorNameMap`` (``model.layers.3.self_attn.q_proj`` ->
  ``blk.3.attn_q``), the Q and K projections permuted into the interleaved RoPE layout
  llama.cpp's own converter writes (transformers un-permutes them when it reads GGUF), the
  output head left out when it is tied to the embeddings. 1-D tensors (norms) stay F32;
  matrices are written as ``f32`` (exact), ``f16`` or ``q8_0`` (quantized by ``gguf.quants``).

Deliberately left out: other architectures (MoE, Qwen, ...: a clear error names the
``model_type``), SentencePiece tokenizers, and the k-quants (Q4_K and friends need llama.cpp's
own ``llama-quantize``; run it on an ``f16`` export).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

GgufType = Literal["f32", "f16", "q8_0"]
SUPPORTED = ("llama",)


class GgufExportError(ValueError):
    """The checkpoint cannot be written as GGUF (the message says why)."""


def _permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """HF's rotate-half Q/K rows -> llama.cpp's interleaved pairs (its converter's layout)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _reference_pre(tokens: list[str], reference: Path | None) -> str:
    if reference is None or not reference.is_file():
        return "default"
    from gguf import GGUFReader

    fields = GGUFReader(str(reference)).fields
    if "tokenizer.ggml.pre" not in fields or "tokenizer.ggml.tokens" not in fields:
        return "default"
    theirs = fields["tokenizer.ggml.tokens"].contents()
    return str(fields["tokenizer.ggml.pre"].contents()) if theirs == tokens else "default"


def _add_tokenizer(writer: Any, tokenizer: Any, vocab_size: int, reference: Path | None) -> None:
    import gguf

    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    if backend.get("model", {}).get("type") != "BPE":
        raise GgufExportError("only byte-level BPE tokenizers are written (this one is not BPE)")
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    special = set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if t.special
    }
    tokens, types = [], []
    for i in range(vocab_size):
        if i in by_id:
            tokens.append(by_id[i])
            ctrl = gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
            types.append(int(ctrl))
        else:  # an embedding row past the tokenizer's vocabulary
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_reference_pre(tokens, reference))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    ids = {
        "bos": tokenizer.bos_token_id,
        "eos": tokenizer.eos_token_id,
        "unk": tokenizer.unk_token_id,
        "pad": tokenizer.pad_token_id,
    }
    for kind, tid in ids.items():
        if tid is not None:
            getattr(writer, f"add_{kind}_token_id")(int(tid))
    writer.add_add_bos_token(False)
    writer.add_add_space_prefix(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def _tensor(t: torch.Tensor, kind: GgufType) -> tuple[np.ndarray, Any]:
    import gguf

    data = t.detach().to(torch.float32).contiguous().numpy()
    if data.ndim == 1 or kind == "f32":
        return data, gguf.GGMLQuantizationType.F32
    if kind == "f16":
        return data.astype(np.float16), gguf.GGMLQuantizationType.F16
    qtype = gguf.GGMLQuantizationType.Q8_0
    if data.shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        return data.astype(np.float16), gguf.GGMLQuantizationType.F16  # rows not in blocks
    return gguf.quants.quantize(data, qtype), qtype


def export_gguf(
    model: Any,
    tokenizer: Any,
    out: Path,
    kind: GgufType = "f16",
    *,
    name: str = "cheetah",
    reference: Path | None = None,
) -> Path:
    """Write ``model`` (a transformers Llama causal LM) and ``tokenizer`` to ``out``."""
    import gguf

    cfg = model.config
    if cfg.model_type not in SUPPORTED:
        raise GgufExportError(
            f"GGUF export writes {', '.join(SUPPORTED)} models; this one is {cfg.model_type!r}"
        )
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    rope = getattr(cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    if rope.get("rope_type", "default") != "default":
        raise GgufExportError(f"RoPE scaling {rope['rope_type']!r} is not written")
    state = model.state_dict()
    vocab = state["model.embed_tokens.weight"].shape[0]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_freq_base(float(theta))
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(vocab)
    writer.add_file_type(
        {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}.get(
            kind, gguf.LlamaFileType.MOSTLY_Q8_0
        )
    )
    _add_tokenizer(writer, tokenizer, vocab, reference)

    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    for hf_name, t in state.items():
        if tied and hf_name == "lm_head.weight":
            continue
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        new = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise GgufExportError(f"no GGUF name for tensor {hf_name!r}")
        if hf_name.endswith("q_proj.weight"):
            t = _permute(t, n_head)
        elif hf_name.endswith("k_proj.weight"):
            t = _permute(t, n_kv)
        data, qtype = _tensor(t, kind)
        writer.add_tensor(new, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out
