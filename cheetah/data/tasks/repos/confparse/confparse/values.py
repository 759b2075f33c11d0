"""Turn raw value strings into Python values."""

from __future__ import annotations

from confparse.units import parse_duration, parse_size

TRUE_WORDS = {"true", "yes", "on"}
FALSE_WORDS = {"false", "no", "off"}


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {text!r}")


def parse_list(text: str) -> list[str]:
    """Comma-separated items, stripped; empty items dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def unquote(text: str) -> str | None:
    """The inside of a "double" or 'single' quoted string, or None when not quoted."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return None


def convert(text: str) -> object:
    """Best-effort typing: quoted string, int, float, bool, duration, size, else the string."""
    raw = text.strip()
    quoted = unquote(raw)
    if quoted is not None:
        return quoted
    for parse in (int, float, parse_bool):
        try:
            return parse(raw)
        except ValueError:
            pass
    if raw and raw[0].isdigit():
        for parse in (parse_duration, parse_size):
            try:
                return parse(raw)
            except ValueError:
                pass
    return raw
