"""Bytes and seconds of one weight sync: a lossless delta against a full checkpoint.

    python bench/weight_sync.py                      # SmolLM2-135M, fp32 and bf16
    python bench/weight_sync.py --model tiny --dtypes float32
    python bench/weight_sync.py --between runs/quickstart/checkpoints/step-2 \
        runs/quickstart/checkpoints/step-3     # one real RL step of a run

Loads the model (float32, CPU), takes ``--warmup-steps`` AdamW steps on random gradients (so
the optimizer's moments are not all at their first-step values, where every weight moves by
exactly ``lr``), copies the weights (the base), takes one more step (the new weights) and
then, per dtype (the weights cast to it, as an engine in that dtype would hold them):

- delta: ``encode_delta(base, new)`` seconds, blob bytes, ``apply_delta`` seconds, and a check
  that the applied weights equal the new ones bit for bit;
- full: ``save_pretrained`` of the new weights (safetensors; the tied ``lm_head`` dropped) and
  ``read_state_dict`` of that directory with every tensor copied into memory (safetensors maps
  the file, so reading alone would defer the work to the page faults of the engine's copy):
  seconds and bytes on disk. The file is in the page cache, so no disk or network time counts.

With ``--between BASE NEW`` (two checkpoints of a run one optimizer step apart, such as the
quickstart's ``step-2`` and ``step-3``) the base and new weights are those of that real RL
step instead. Each timing is the best of ``--repeat`` (default 1). Left out: the HTTP transfer itself (bytes are what it
costs), the server's ``load_state_dict`` (the same for both paths), GPU runs, and real
gradients (a random-gradient step changes every weight, as a real step does, but its
direction is noise).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

from cheetah.inference.weight_delta import apply_delta, encode_delta, read_header
from cheetah.model.loading import load_model, read_state_dict


def _best(repeat: int, fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, out


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> None:
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-3
    opt.step()


def _state(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: v.detach().to(dtype=dtype, copy=True) for k, v in model.state_dict().items()}


def _read_into_memory(directory: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in read_state_dict(directory).items()}


def _bit_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype
        and a[k].shape == b[k].shape
        and torch.equal(a[k].reshape(-1).view(torch.uint8), b[k].reshape(-1).view(torch.uint8))
        for k in b
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--between",
        nargs=2,
        metavar=("BASE", "NEW"),
        help="two checkpoint directories of a run, one optimizer step apart: measure that "
        "real step instead of a random-gradient one",
    )
    args = ap.parse_args()
    print("command: python " + shlex.join(sys.argv), flush=True)
    print(f"threads: torch {torch.get_num_threads()}, cpus {os.cpu_count()}", flush=True)

    if args.between:
        base_dir, args.model = args.between
        base32 = _state(load_model(base_dir).model, torch.float32)
        model = load_model(args.model).model
        what = f"one real optimizer step: {base_dir} -> {args.model}"
    else:
        model = load_model(args.model).model
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        gen = torch.Generator().manual_seed(0)
        for _ in range(args.warmup_steps):
            _step(model, opt, gen)
        base32 = _state(model, torch.float32)
        _step(model, opt, gen)
        what = f"AdamW lr {args.lr:g}, {args.warmup_steps} warm-up steps, then one step"
    params = sum(p.numel() for p in model.parameters())
    print(
        f"model {args.model}: {params / 1e6:.1f}M parameters, {len(base32)} tensors; {what}",
        flush=True,
    )

    ratios = [_measure(args, name, base32, model) for name in args.dtypes.split(",")]
    for name, size, seconds in ratios:
        print(f"ratio {name}: delta/full bytes {size:.3f}, delta/full seconds {seconds:.2f}")


def _measure(
    args: argparse.Namespace, name: str, base32: dict[str, torch.Tensor], model: torch.nn.Module
) -> tuple[str, float, float]:
    """Print one dtype's rows; its delta/full ratios of bytes and of seconds."""
    dtype = getattr(torch, name)
    base = {k: v.to(dtype) for k, v in base32.items()}
    new = _state(model, dtype)
    numel = sum(v.numel() for v in new.values())
    changed = sum(int((base[k] != new[k]).sum()) for k in new) / numel
    enc_s, blob = _best(args.repeat, encode_delta, base, new, 1, 2)
    app_s, (out, _) = _best(args.repeat, apply_delta, base, blob, 1)
    modes: dict[str, int] = {}
    for entry in read_header(blob)[0]["tensors"]:
        modes[entry["mode"]] = modes.get(entry["mode"], 0) + 1
    full_model = load_model(args.model).model.to(dtype)
    full_model.load_state_dict(new)
    with tempfile.TemporaryDirectory() as tmp:
        save_s, _ = _best(args.repeat, full_model.save_pretrained, tmp)
        full = sum(f.stat().st_size for f in Path(tmp).glob("*.safetensors"))
        read_s, _ = _best(args.repeat, _read_into_memory, tmp)
    print(
        f"{name}: {changed:.1%} of weights changed; tensors by mode {modes}\n"
        f"  delta: {len(blob) / 1e6:8.1f} MB  encode {enc_s:6.2f} s  apply {app_s:6.2f} s  "
        f"bit-exact: {'yes' if _bit_equal(out, new) else 'NO'}\n"
        f"  full:  {full / 1e6:8.1f} MB  save   {save_s:6.2f} s  read  {read_s:6.2f} s",
        flush=True,
    )
    return name, len(blob) / full, (enc_s + app_s) / (save_s + read_s)


if __name__ == "__main__":
    main()
