"""MXFP8 emulation: how far it moves the policy's numbers, and what emulation costs on CPU.

For the embedded default model (SmolLM2-135M) and the same model upcycled into a MoE
(4 experts, top 2), on a fixed chat-formatted text, compares in the same run:
- fp32 against MXFP8 (both scale modes): mean and max absolute difference of the
  per-token logprobs of the text, and agreement of the greedy next token;
- the time of one forward+backward step, fp32 against MXFP8 emulation (median of
  ``--repeat``). Emulation quantizes in software: it is slower, not faster; the speed of
  native MX GEMMs needs an MX-capable GPU and is not measured here.

    python bench/mxfp8.py [--repeat 3] [--tokens 256]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

TEXT = (
    "The function parse_date in utils/dates.py returns the wrong month for dates "
    "written as DD/MM/YYYY. Read the file, find the bug, fix it and run the tests. "
)


def step_time(model, ids, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model(ids, labels=ids).loss.backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def logprobs(model, ids):
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return lp.gather(-1, ids[0, 1:, None])[:, 0], lp.argmax(-1)


def main() -> None:
    import cheetah.model.mxfp8 as mx
    from cheetah.model.loading import load_model
    from cheetah.model.moe import upcycle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    torch.manual_seed(0)
    loaded = load_model("default")
    ids = loaded.tokenizer(TEXT * 20, return_tensors="pt").input_ids[:, : args.tokens]
    models = {"dense": loaded.model, "moe-4x2": upcycle(loaded.model, 4, 2)}
    print(f"{ids.shape[1]} tokens; logprob difference against fp32 and step time (median of "
          f"{args.repeat})")  # fmt: skip
    print(f"{'model':<8} {'mode':<6} {'mean |dlp|':>10} {'max |dlp|':>9} {'argmax agree':>12} "
          f"{'step s':>7} {'vs fp32':>7}")  # fmt: skip
    for name, model in models.items():
        ref_lp, ref_top = logprobs(model, ids)
        base = step_time(model.train(), ids, args.repeat)
        print(f"{name:<8} {'fp32':<6} {0:>10.4f} {0:>9.4f} {1:>12.3f} {base:>7.2f} {1:>6.2f}x")
        for mode in ("floor", "rceil"):
            mx.MODE = mode
            q = copy.deepcopy(model).eval()
            mx.convert_to_mxfp8(q)
            lp, top = logprobs(q, ids)
            d = (lp - ref_lp).abs()
            t = step_time(q.train(), ids, args.repeat)
            print(
                f"{name:<8} {mode:<6} {d.mean():>10.4f} {d.max():>9.4f} "
                f"{(top == ref_top).float().mean():>12.3f} {t:>7.2f} {t / base:>6.2f}x"
            )
        mx.MODE = "rceil"


if __name__ == "__main__":
    main()
