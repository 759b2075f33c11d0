"""INI-style parsing: sections, key = value pairs, comments and continuation lines."""

from __future__ import annotations

from confparse.values import convert

COMMENT_PREFIXES = ("#", ";")


class ConfigError(ValueError):
    """Malformed config text; ``line`` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def _strip_comment(line: str) -> str:
    """Drop an inline comment: " #" or " ;" outside quotes."""
    quote = ""
    for i, ch in enumerate(line):
        if ch in "\"'":
            if not quote:
                quote = ch
            elif quote == ch:
                quote = ""
        elif ch in "#;" and not quote and i > 0 and line[i - 1].isspace():
            return line[:i].rstrip()
    return line


def parse_raw(text: str) -> dict[str, dict[str, str]]:
    """Sections of raw (untyped) values. Keys before any section go to "DEFAULT"."""
    sections: dict[str, dict[str, str]] = {}
    current = "DEFAULT"
    last_key: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(COMMENT_PREFIXES):
            continue
        if line[0].isspace() and last_key is not None:
            sections[current][last_key] += " " + _strip_comment(stripped)
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]"):
                raise ConfigError(f"unclosed section header {stripped!r}", number)
            current = stripped[1:-1].strip()
            if not current:
                raise ConfigError("empty section name", number)
            sections.setdefault(current, {})
            last_key = None
            continue
        if "=" not in stripped:
            raise ConfigError(f"expected 'key = value', got {stripped!r}", number)
        key, value = stripped.split("=", 1)
        key = key.strip().lower()
        if not key:
            raise ConfigError("empty key", number)
        sections.setdefault(current, {})[key] = _strip_comment(value.strip())
        last_key = key
    return sections


def load(text: str) -> dict[str, dict[str, object]]:
    """Parse config text into sections of typed values."""
    return {
        name: {key: convert(value) for key, value in items.items()}
        for name, items in parse_raw(text).items()
    }
