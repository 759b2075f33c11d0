"""Sparse upcycling: a dense Llama-family checkpoint becomes a Mixtral mixture of experts.

Every decoder layer's MLP is copied into ``num_experts`` experts (transformers'
``MixtralExperts``: ``gate_up_proj`` = [gate; up], ``down_proj``), and a router (one
linear layer per MoE block) is added with small random weights, so tokens already pick
different experts while the model, at step 0, computes exactly what the dense one did:
the top-k weights are renormalized to sum to one and every expert is the same MLP.
Attention, norms, embeddings and the LM head are copied as they are. The result is a
plain ``MixtralForCausalLM``: ``save_pretrained`` writes an HF checkpoint that
``load_model``, ``cheetah serve`` and any transformers user load.

Training it turns the copies into different experts (the router's gradient flows
through the renormalized top-k weights). ``train.mxfp8`` runs it with MXFP8 GEMMs
(cheetah/model/mxfp8.py). Deliberately left out: the load-balancing auxiliary loss
during RL (transformers computes it only when ``output_router_logits`` is set),
expert parallelism across devices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class UpcycleError(ValueError):
    """The dense model cannot be upcycled (architecture, expert counts)."""


def moe_config(dense_config: Any, num_experts: int, top_k: int) -> Any:
    from transformers import MixtralConfig

    if dense_config.model_type not in ("llama", "mistral"):
        raise UpcycleError(
            f"upcycling needs a Llama- or Mistral-style model, got {dense_config.model_type!r}"
        )
    if getattr(dense_config, "mlp_bias", False) or getattr(dense_config, "attention_bias", False):
        raise UpcycleError("upcycling needs a model without MLP or attention biases (as Mixtral)")
    if not 1 <= top_k <= num_experts:
        raise UpcycleError(f"top_k must be between 1 and num_experts ({num_experts}), got {top_k}")
    d = dense_config
    return MixtralConfig(
        vocab_size=d.vocab_size,
        hidden_size=d.hidden_size,
        intermediate_size=d.intermediate_size,
        num_hidden_layers=d.num_hidden_layers,
        num_attention_heads=d.num_attention_heads,
        num_key_value_heads=d.num_key_value_heads,
        head_dim=getattr(d, "head_dim", None) or d.hidden_size // d.num_attention_heads,
        hidden_act=d.hidden_act,
        max_position_embeddings=d.max_position_embeddings,
        rms_norm_eps=d.rms_norm_eps,
        rope_parameters=dict(getattr(d, "rope_parameters", None) or {}) or None,
        tie_word_embeddings=d.tie_word_embeddings,
        bos_token_id=d.bos_token_id,
        eos_token_id=d.eos_token_id,
        pad_token_id=getattr(d, "pad_token_id", None),
        sliding_window=None,
        num_local_experts=num_experts,
        num_experts_per_tok=top_k,
        output_router_logits=False,
    )


def upcycle(
    dense: Any, num_experts: int = 4, top_k: int = 2, router_std: float = 0.02, seed: int = 0
):
    """A ``MixtralForCausalLM`` holding ``dense`` with each MLP copied into the experts."""
    from transformers import MixtralForCausalLM

    config = moe_config(dense.config, num_experts, top_k)
    moe = MixtralForCausalLM(config).to(torch.float32)
    state = dense.state_dict()
    mlp_keys = {k for k in state if ".mlp." in k}
    missing, unexpected = moe.load_state_dict(
        {k: v for k, v in state.items() if k not in mlp_keys}, strict=False
    )
    expected_missing = {k for k in moe.state_dict() if ".mlp." in k}
    if set(missing) - expected_missing or unexpected:
        raise UpcycleError(
            f"weights do not line up: missing {sorted(set(missing) - expected_missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for i, layer in enumerate(moe.model.layers):
            gate = state[f"model.layers.{i}.mlp.gate_proj.weight"]
            up = state[f"model.layers.{i}.mlp.up_proj.weight"]
            down = state[f"model.layers.{i}.mlp.down_proj.weight"]
            block = layer.mlp
            block.experts.gate_up_proj.copy_(
                torch.cat([gate, up]).expand_as(block.experts.gate_up_proj)
            )
            block.experts.down_proj.copy_(down.expand_as(block.experts.down_proj))
            w = block.gate.weight
            w.copy_(torch.randn(w.shape, generator=gen) * router_std)
    if config.tie_word_embeddings:
        moe.tie_weights()
    return moe.eval()


def upcycle_checkpoint(
    spec: str, out: str | Path, num_experts: int = 4, top_k: int = 2, seed: int = 0
) -> Path:
    """Load ``spec`` (default, tiny, an HF dir), upcycle it, save model + tokenizer to ``out``."""
    from cheetah.model.loading import load_model

    loaded = load_model(spec)
    moe = upcycle(loaded.model, num_experts, top_k, seed=seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    moe.save_pretrained(out)
    loaded.tokenizer.save_pretrained(out)
    return out
