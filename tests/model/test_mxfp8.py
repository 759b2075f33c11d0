"""MXFP8 emulation: exact values by hand, both scale modes, the three GEMMs, conversion."""

import pytest
import torch

from cheetah.model.mxfp8 import (
    convert_to_mxfp8,
    dequantize,
    dequantize_state_dict,
    fake_quant,
    mx_linear,
    quantize,
    quantize_state_dict,
)


def test_values_by_hand_in_both_scale_modes():
    x = torch.zeros(32)
    x[0], x[1], x[2] = 1.9, 0.3, -0.0078125
    # floor: amax 1.9 -> exponent floor(log2 1.9) - 8 = -8; 1.9 * 256 = 486.4 saturates at 448
    elems, scales = quantize(x, mode="floor")
    assert scales.tolist() == [127 - 8] and elems.dtype == torch.float8_e4m3fn
    d = dequantize(elems, scales)
    assert d[0] == 448 / 256 and d[1] == 80 / 256 and d[2] == -2 / 256  # 76.8 -> 80 (step 8)
    # rceil: exponent ceil(log2(1.9 / 448)) = -7; 1.9 * 128 = 243.2 -> 240 (step 16), no clip
    elems, scales = quantize(x, mode="rceil")
    d = dequantize(elems, scales)
    assert scales.tolist() == [127 - 7] and d[0] == 240 / 128 and d[1] == 40 / 128
    with pytest.raises(ValueError, match="scale mode"):
        quantize(x, mode="round")


def test_blocks_padding_zero_blocks_and_idempotence():
    torch.manual_seed(0)
    x = torch.randn(3, 70) * 5
    x[1, 32:64] = 0
    elems, scales = quantize(x, mode="floor")
    assert elems.shape == (3, 70) and scales.shape == (3, 3) and scales.dtype == torch.uint8
    assert scales[1, 1] == 0  # an all-zero block gets the smallest scale, 2**-127
    q = dequantize(elems, scales)
    assert torch.equal(
        fake_quant(q, mode="floor"), q
    )  # MX values are representable: quantizing is exact
    assert torch.equal(q[1, 32:64], torch.zeros(32))
    scale = torch.exp2(scales.float() - 127).repeat_interleave(32, dim=1)[:, :70]
    # floor mode: within half an E4M3 step (2**-4 relative) unless clipped at 448 * scale
    assert (
        ((q - x).abs() <= torch.maximum(x.abs() * 2**-4, scale * 2**-10) + 1e-6)
        .logical_or(q.abs() == 448 * scale)
        .all()
    )
    cols = quantize(x, dim=0)[1]
    assert cols.shape == (1, 70)  # blocks along dim 0: one block of 3 rows per column


def test_mx_linear_uses_mx_inputs_in_all_three_gemms():
    torch.manual_seed(1)
    x = torch.randn(5, 64, requires_grad=True)
    w = torch.randn(40, 64, requires_grad=True)
    g = torch.randn(5, 40)
    y = mx_linear(x, w)
    assert torch.allclose(y, fake_quant(x.detach()) @ fake_quant(w.detach()).T, atol=1e-5)
    y.backward(g)
    gx = fake_quant(g, 1) @ fake_quant(w.detach(), 0)
    gw = fake_quant(g.T, 1) @ fake_quant(x.detach().T, 1).T
    assert torch.allclose(x.grad, gx, atol=1e-5) and torch.allclose(w.grad, gw, atol=1e-5)
    exact = g.T @ x.detach()
    assert (w.grad - exact).norm() / exact.norm() < 0.1  # close to full precision


def test_converted_model_keeps_its_checkpoint_format_and_trains():
    from cheetah.model.loading import build_tiny

    model = build_tiny().model.train()
    keys = set(model.state_dict())
    ids = torch.randint(0, 200, (2, 16))
    with torch.no_grad():
        ref = model(ids).logits
    n = convert_to_mxfp8(model)
    assert n == 2 * 7 and set(model.state_dict()) == keys  # 7 linears per layer, lm_head kept
    with torch.no_grad():
        mx = model(ids).logits
    # the tiny test model is random with a wide init, so 8-bit inputs move its logits a lot
    assert torch.nn.functional.cosine_similarity(mx.flatten(), ref.flatten(), dim=0) > 0.95
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(4):
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


def test_quantized_state_dict_round_trips_to_the_trainers_values(tmp_path):
    from safetensors.torch import load_file, save_file

    state = {"layer.weight": torch.randn(8, 64), "norm.weight": torch.ones(8)}
    q = quantize_state_dict(state)
    assert q["layer.weight"].dtype == torch.float8_e4m3fn and "norm.weight.mx_scale" not in q
    save_file(q, tmp_path / "w.safetensors")
    back = dequantize_state_dict(load_file(tmp_path / "w.safetensors"))
    assert torch.equal(back["layer.weight"], fake_quant(state["layer.weight"]))
    assert torch.equal(back["norm.weight"], state["norm.weight"])
