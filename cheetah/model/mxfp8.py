"""MXFP8 (OCP Microscaling v1.0, E4M3 elements) emulated exactly on any device.

An MX block is 32 consecutive values along a matrix's reduction dimension sharing one
power-of-two scale (E8M0). The spec's scale ("floor" mode) is
``2 ** (floor(log2(amax)) - 8)`` (8 being the exponent of E4M3's largest normal,
448 = 1.75 * 2**8), clamped to E8M0's range; each element is ``value / scale`` rounded
to nearest-even E4M3 (torch's own float8_e4m3fn cast) and saturated at +-448, so a
block's largest values can clip by up to 12.5 %. "rceil" mode (what NVIDIA's
conversion instructions do) rounds the scale up instead, ``2 ** ceil(log2(amax / 448))``,
and never clips; ``MODE`` picks the default: "rceil", the one with the smaller logprob
error on the default model in bench/mxfp8.py. ``quantize`` gives the E4M3 bytes and scales (what a
checkpoint stores and an MX tensor core reads); ``fake_quant`` gives their exact values
in the input dtype.

``mx_linear`` runs all three GEMMs of a linear layer the way an MXFP8 recipe does on
hardware: forward ``Q(x) @ Q(W)^T`` with blocks along K; input gradient
``Q(dY) @ Q(W)`` with blocks along N; weight gradient ``Q(dY^T) @ Q(X^T)^T`` with
blocks along M; accumulation in fp32. The quantized values are bit-exact with what
MX hardware consumes; only the fp32 accumulation order can differ from a tensor core.
``MXLinear`` and ``MXMixtralExperts`` are drop-in module classes (same parameters, so
checkpoints stay HF-compatible); ``convert_to_mxfp8`` swaps them in.

Native execution: on a GPU with MX tensor cores (Blackwell) the same layers could call
``torch._scaled_mm`` with E8M0 scales; that path is not built, because no such GPU
was available to test it (an H200 has FP8 but not MX block scaling).
Deliberately left out: MXFP8 for attention score/softmax math and the LM head, which
recipes keep in bf16 too.
"""

from __future__ import annotations

import torch
from torch import nn

BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8
E8M0_MIN, E8M0_MAX = -127, 127
MODE = "rceil"  # measured closer to fp32 than the spec's "floor" (BENCHMARKS.md)


def _blocks(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    """``x`` with ``dim`` moved last and split into blocks of 32 (zero-padded)."""
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    pad = (-n) % BLOCK
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.reshape(*x.shape[:-1], -1, BLOCK), n


def shared_exponents(blocks: torch.Tensor, mode: str | None = None) -> torch.Tensor:
    """The E8M0 exponent of each block (int32), clamped to [-127, 127]."""
    mode = mode or MODE
    amax = blocks.abs().amax(dim=-1).float().clamp(min=torch.finfo(torch.float32).tiny)
    if mode == "floor":
        exp = torch.floor(torch.log2(amax)) - E4M3_EMAX
    elif mode == "rceil":
        exp = torch.ceil(torch.log2(amax / E4M3_MAX))
    else:
        raise ValueError(f"unknown MX scale mode {mode!r}; choose 'floor' or 'rceil'")
    return exp.clamp(E8M0_MIN, E8M0_MAX).to(torch.int32)


def quantize(
    x: torch.Tensor, dim: int = -1, mode: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 elements shaped like ``x``, uint8 E8M0 scales: one per 32 along ``dim``)."""
    blocks, n = _blocks(x.float(), dim)
    exp = shared_exponents(blocks, mode)
    scale = torch.exp2(exp.float()).unsqueeze(-1)
    elems = (blocks / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    elems = elems.reshape(*elems.shape[:-2], -1)[..., :n].movedim(-1, dim)
    scales = (exp + 127).to(torch.uint8).movedim(-1, dim)
    return elems.contiguous(), scales.contiguous()


def dequantize(elems: torch.Tensor, scales: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The values ``quantize`` stored, in float32."""
    e, n = _blocks(elems.float(), dim)
    exp = scales.movedim(dim, -1).to(torch.int32) - 127
    out = e * torch.exp2(exp.float()).unsqueeze(-1)
    return out.reshape(*out.shape[:-2], -1)[..., :n].movedim(-1, dim)


def fake_quant(x: torch.Tensor, dim: int = -1, mode: str | None = None) -> torch.Tensor:
    """``x`` rounded to MXFP8 along ``dim``, in ``x``'s dtype (exact: values are representable)."""
    elems, scales = quantize(x, dim, mode)
    return dequantize(elems, scales, dim).to(x.dtype)


class _MXLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        x2 = x.reshape(-1, x.shape[-1])
        y = fake_quant(x2.float(), -1) @ fake_quant(w.float(), 1).T  # blocks along K
        return y.reshape(*x.shape[:-1], w.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, w = ctx.saved_tensors
        g2 = grad_y.reshape(-1, grad_y.shape[-1]).float()
        x2 = x.reshape(-1, x.shape[-1]).float()
        grad_x = fake_quant(g2, 1) @ fake_quant(w.float(), 0)  # blocks along N
        grad_w = fake_quant(g2.T, 1) @ fake_quant(x2.T, 1).T  # blocks along M
        return grad_x.reshape(x.shape).to(x.dtype), grad_w.to(w.dtype)


def mx_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` with every GEMM input (forward and backward) in MXFP8."""
    return _MXLinearFn.apply(x, weight)


class MXLinear(nn.Linear):
    """``nn.Linear`` whose matmuls run in emulated MXFP8 (bias added in full precision)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = mx_linear(x, self.weight)
        return y + self.bias if self.bias is not None else y


def _mx_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """transformers' MixtralExperts.forward with the two expert GEMMs in MXFP8."""
    out = torch.zeros_like(hidden_states)
    with torch.no_grad():
        mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
        mask = mask.permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit:
        e = int(e[0])
        if e == self.num_experts:
            continue
        pos, tok = torch.where(mask[e])
        gate, up = mx_linear(hidden_states[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
        h = mx_linear(self.act_fn(gate) * up, self.down_proj[e])
        out.index_add_(0, tok, (h * top_k_weights[tok, pos, None]).to(out.dtype))
    return out


def convert_to_mxfp8(model: nn.Module, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Swap every ``nn.Linear`` (but ``skip``) to ``MXLinear`` and Mixtral expert blocks to
    MXFP8 GEMMs, in place. Parameters and state-dict keys do not change. Returns how many
    modules were converted."""
    n = 0
    for name, module in model.named_modules():
        if any(name == s or name.endswith("." + s) for s in skip):
            continue
        if type(module) is nn.Linear:
            module.__class__ = MXLinear
            n += 1
        elif type(module).__name__ == "MixtralExperts":
            module.forward = _mx_experts_forward.__get__(module)
            n += 1
    return n


def quantize_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """2-D+ weights as E4M3 + ``<name>.mx_scale`` (blocks along the last dim); the rest kept.

    What an engine loads to serve exactly the weights an MXFP8 trainer computes with.
    """
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if v.ndim >= 2 and v.is_floating_point() and "embed" not in k and "norm" not in k:
            out[k], out[f"{k}.mx_scale"] = quantize(v, -1)
        else:
            out[k] = v
    return out


def dequantize_state_dict(
    state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in state.items():
        if k.endswith(".mx_scale"):
            continue
        scale = state.get(f"{k}.mx_scale")
        out[k] = dequantize(v, scale, -1).to(dtype) if scale is not None else v
    return out
