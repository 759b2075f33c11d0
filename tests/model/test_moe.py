"""Upcycling a dense checkpoint into a Mixtral MoE: same function at step 0, HF round trip,
experts that diverge under training, served by the engine (also in MXFP8)."""

import pytest
import torch

from cheetah.model.loading import build_tiny, load_model
from cheetah.model.moe import UpcycleError, upcycle, upcycle_checkpoint


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


def test_upcycled_model_computes_what_the_dense_one_did(tiny):
    moe = upcycle(tiny.model, num_experts=4, top_k=2)
    assert moe.config.model_type == "mixtral" and moe.config.num_local_experts == 4
    ids = torch.randint(0, 300, (2, 20))
    with torch.no_grad():
        assert torch.allclose(moe(ids).logits, tiny.model(ids).logits, atol=1e-4)
        logits = moe.model.layers[0].mlp.gate(torch.randn(5, moe.config.hidden_size))[0]
    assert logits.std() > 0  # the router is not constant: tokens pick different experts


def test_checkpoint_round_trip_through_load_model(tmp_path):
    out = upcycle_checkpoint("tiny", tmp_path / "moe", num_experts=3, top_k=1)
    loaded = load_model(out)
    assert type(loaded.model).__name__ == "MixtralForCausalLM"
    dense = build_tiny()
    ids = torch.randint(0, 300, (1, 12))
    with torch.no_grad():
        assert torch.allclose(loaded.model(ids).logits, dense.model(ids).logits, atol=1e-4)


def test_training_makes_the_experts_diverge(tiny):
    moe = upcycle(tiny.model, num_experts=4, top_k=2).train()
    opt = torch.optim.AdamW(moe.parameters(), lr=1e-2)
    ids = torch.randint(0, 300, (4, 24))
    router0 = moe.model.layers[0].mlp.gate.weight.detach().clone()
    for _ in range(3):
        loss = moe(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    experts = moe.model.layers[0].mlp.experts.gate_up_proj.detach()
    assert not torch.equal(experts[0], experts[1])
    assert not torch.equal(moe.model.layers[0].mlp.gate.weight.detach(), router0)


def test_bad_upcycling_requests_are_refused(tiny):
    with pytest.raises(UpcycleError, match="top_k"):
        upcycle(tiny.model, num_experts=2, top_k=3)
    moe = upcycle(tiny.model, num_experts=2, top_k=1)
    with pytest.raises(UpcycleError, match="Llama- or Mistral-style"):
        upcycle(moe, num_experts=2, top_k=1)


async def test_engine_serves_the_moe_in_mxfp8_with_the_trainers_weights(tiny):
    from cheetah.inference.local import LocalEngine
    from cheetah.inference.protocol import SamplingParams
    from cheetah.model.mxfp8 import convert_to_mxfp8, fake_quant

    moe = upcycle(tiny.model, num_experts=4, top_k=2)
    assert convert_to_mxfp8(moe) > 0
    engine = LocalEngine(moe, tiny.tokenizer, max_batch=2)
    try:
        out = await engine.generate([1, 2, 3, 4], SamplingParams(temperature=0.0, max_tokens=5))
        assert len(out.token_ids) == len(out.logprobs) == 5
        # the logprobs the engine reports are the MXFP8 model's own (the trainer's forward)
        ids = torch.tensor([[1, 2, 3, 4, *out.token_ids]])
        with torch.no_grad():
            lp = torch.log_softmax(moe(ids).logits[0, 3:-1].float(), -1)
        mine = lp.gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
        assert torch.allclose(mine, torch.tensor(out.logprobs), atol=1e-3)
    finally:
        engine.close()
    w = moe.model.layers[0].mlp.experts.down_proj[0].detach()
    assert torch.equal(fake_quant(fake_quant(w)), fake_quant(w))


def test_cli_upcycle(tmp_path, capsys):
    from cheetah.cli import main

    assert main(["moe", "upcycle", "--model", "tiny", "--experts", "2", "--top-k", "3",
                 "--out", str(tmp_path / "bad")]) == 2  # fmt: skip
    assert "top_k must be between" in capsys.readouterr().err
    assert main(["moe", "upcycle", "--model", "tiny", "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "config.json").is_file()
