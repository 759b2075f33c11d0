"""Sampling one token per row: temperature, top-k, top-p, and the logprob we report.

Greedy rows (temperature 0) take the argmax and report the model's plain log-softmax (the
sampling distribution is a point mass, so its logprob, 0, would tell a trainer nothing).
Other rows draw from softmax(logits / T) restricted to the top-k tokens, then to the smallest
set whose mass reaches top-p, renormalized; the reported logprob is the sampled token's under
that renormalized distribution, i.e. the behaviour policy's probability. A trainer that
recomputes logprobs at temperature T without truncation sees the difference only on
truncated mass; the importance weights measure it.

Each row draws with its own ``torch.Generator``, so a seeded request samples the same tokens
whatever else shares its batch. Left out: repetition/frequency penalties, logit bias, min-p.
"""

from __future__ import annotations

import torch

from cheetah.inference.protocol import SamplingParams


def sample(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
    """Sample one token per row; return ids, their logprobs and requested alternatives.

    Rows with temperature 0 take the argmax and report the plain log-softmax; other rows draw
    from softmax(logits / T) restricted to the top-k, then to the top-p nucleus, and report
    the logprob under that renormalized distribution (see the module docstring).
    """
    ids: list[int] = [0] * len(params)
    logprobs: list[float] = [0.0] * len(params)
    tops: list[list[tuple[int, float]]] = [[] for _ in params]
    greedy = [i for i, p in enumerate(params) if p.temperature == 0.0]
    if greedy:
        lp = torch.log_softmax(logits[greedy], dim=-1)
        best = lp.argmax(-1)
        for j, row in enumerate(greedy):
            ids[row] = int(best[j])
            logprobs[row] = float(lp[j, best[j]])
            k = params[row].top_logprobs
            if k:
                values, index = lp[j].topk(k)
                tops[row] = list(zip(index.tolist(), values.tolist(), strict=True))
    sampled = [i for i, p in enumerate(params) if p.temperature > 0.0]
    if not sampled:
        return ids, logprobs, tops
    temps = torch.tensor([params[i].temperature for i in sampled])
    scaled = logits[sampled] / temps[:, None]
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(scaled.shape[-1])
    top_k = torch.tensor([params[i].top_k or scaled.shape[-1] for i in sampled])
    sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= top_k[:, None], float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    # top_p 1 must keep every token, even where rounding lets the cumulative sum reach 1 early
    top_p = torch.tensor([params[i].top_p if params[i].top_p < 1.0 else 2.0 for i in sampled])
    before = probs.cumsum(-1) - probs  # mass strictly above each token; the first is always 0
    sorted_logits = sorted_logits.masked_fill(before >= top_p[:, None], float("-inf"))
    lp = torch.log_softmax(sorted_logits, dim=-1)
    for j, row in enumerate(sampled):
        pick = int(torch.multinomial(lp[j].exp(), 1, generator=generators[row]))
        ids[row] = int(order[j, pick])
        logprobs[row] = float(lp[j, pick])
        k = params[row].top_logprobs
        if k:
            tops[row] = [
                (int(order[j, n]), float(lp[j, n])) for n in range(k) if lp[j, n] > float("-inf")
            ]
    return ids, logprobs, tops
