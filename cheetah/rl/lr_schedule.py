"""The learning-rate schedule of SFT and RL steps: linear warmup, then cosine or constant.

A pure function of the step, so a resumed run continues the same schedule.
"""

from __future__ import annotations

import math


def lr_at(step: int, total: int, peak: float, warmup_frac: float, decay: str) -> float:
    """The learning rate of step ``step`` (0-based) of ``total``: a linear warmup over the
    first ``warmup_frac`` of the steps, then constant or a cosine decay to 10% of ``peak``."""
    warmup = round(warmup_frac * total)
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    if decay == "constant" or total - warmup <= 1:
        return peak
    progress = (step - warmup) / (total - warmup - 1)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
