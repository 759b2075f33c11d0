"""A command-line todo list."""

__version__ = "0.4.0"
