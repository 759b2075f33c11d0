"""``Pace``: when a long job should print its next progress line.

Users run long jobs (``make demo``, curriculum generation, validation) into logs where a
progress bar does not render, so they print a plain line about every ten seconds and one at
the end. Every such loop asks ``Pace`` instead of keeping its own clock.
Left out: rate and time-left estimates (the lines carry done/total; the run log stamps time).
"""

from __future__ import annotations

import time


class Pace:
    def __init__(self, seconds: float = 10.0) -> None:
        self.seconds = seconds
        self.last = time.monotonic()

    def due(self, final: bool = False) -> bool:
        """True when ``seconds`` have passed since the last line (or ``final``); a True
        answer starts the next interval."""
        now = time.monotonic()
        if final or now - self.last >= self.seconds:
            self.last = now
            return True
        return False
