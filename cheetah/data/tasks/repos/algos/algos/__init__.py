"""Classic algorithms over plain Python types."""

__version__ = "0.2.0"
