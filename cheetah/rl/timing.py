"""Where a training run's wall time goes: seconds per phase, kept in the run store.

``TrainJob`` wraps each part of the job in ``PhaseClock.phase(name)``: starting Ray, the
engine and the workers (``startup``), each held-out stage (``stage:<label>``), SFT's
demonstrations, optimizer steps and weight sync, and in RL the trainer's steps, the weight
syncs and ``rl:waiting_for_rollouts`` (the trainer idle until the next batch of groups is
complete: what rollouts cost beyond what overlaps with training). Seconds add up per name
and are saved in the store's meta after each phase, so a resumed run keeps counting.
``breakdown`` turns them into the summary's ``time_breakdown``: each phase's seconds and
share of the total wall time, the slowest first, and what no phase accounts for
(``other``: plots, checkpoints, logging).

Deliberately left out: per-rollout detail (the rollouts' own records have their turns and
tool time) and CPU time (phases overlap on purpose: rollouts run while the trainer steps).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

META_KEY = "time_breakdown"


class PhaseClock:
    """Seconds per phase name, persisted through ``store`` (``get_meta``/``set_meta``),
    with the wall time of this process added to that of the run's earlier ones."""

    def __init__(self, store: Any) -> None:
        self.store = store
        held = store.get_meta(META_KEY) or {}
        self.seconds: dict[str, float] = dict(held.get("phases", {}))
        self._wall_before = float(held.get("wall_s", 0.0))
        self._t0 = time.perf_counter()

    def wall_s(self) -> float:
        return self._wall_before + time.perf_counter() - self._t0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.store.set_meta(META_KEY, {"phases": self.seconds, "wall_s": self.wall_s()})

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)


def breakdown(seconds: dict[str, float], wall_s: float) -> dict[str, Any]:
    """The summary's ``time_breakdown``: phases by time, slowest first, with shares of
    ``wall_s`` and the unaccounted rest as ``other``."""
    rows = sorted(seconds.items(), key=lambda kv: -kv[1])
    other = max(0.0, wall_s - sum(seconds.values()))
    phases = [
        {"phase": name, "seconds": round(s, 2), "share": round(s / wall_s, 4) if wall_s else 0.0}
        for name, s in [*rows, ("other", other)]
    ]
    return {"wall_s": round(wall_s, 2), "phases": phases, "slowest": rows[0][0] if rows else None}


def table(b: dict[str, Any]) -> str:
    """A few lines for the log: phase, seconds, share."""
    lines = [f"where the time went ({b['wall_s']:.0f} s wall):"]
    lines += [f"  {p['phase']:<28} {p['seconds']:>8.1f} s  {p['share']:6.1%}" for p in b["phases"]]
    return "\n".join(lines)
