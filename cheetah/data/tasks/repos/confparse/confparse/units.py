"""Durations ("1h30m", "250ms") and sizes ("10MB", "512KiB")."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_duration(text: str) -> float:
    """Seconds in a duration like "1h30m", "45s", "1.5h" or "250ms"."""
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty duration")
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"not a duration: {text!r}")
    return total


def parse_size(text: str) -> int:
    """Bytes in a size like "10MB", "512 KiB" or "42" (plain bytes)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = (m.group(2) or "B").lower()
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def format_duration(seconds: float) -> str:
    """The inverse of ``parse_duration`` for whole seconds: 5400 -> "1h30m"."""
    if seconds < 0:
        raise ValueError("negative duration")
    rest = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"
