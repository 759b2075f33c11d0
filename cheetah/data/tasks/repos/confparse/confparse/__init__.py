"""Parse INI-style config text into typed values."""

from confparse.parser import ConfigError, load
from confparse.units import parse_duration, parse_size

__all__ = ["ConfigError", "load", "parse_duration", "parse_size"]
