"""pytest-specdec: catch speculative-decoding regressions with pytest."""

__version__ = "0.1.0"
