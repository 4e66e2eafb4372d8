"""Option parsers shared by the pytest plugin and the ``specdec`` CLI.

Each parser validates where the value is parsed and raises ``argparse.ArgumentTypeError``
naming the value and the fix (pytest turns it into a usage error naming the flag).
"""

from __future__ import annotations

import argparse
from urllib.parse import urlparse

ENGINE_CHOICES = ("llamacpp", "sglang", "vllm", "openai")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number; give e.g. 5") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 1")
    return number


def non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number; give e.g. 0") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be 0 or more")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number; give e.g. 120") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be greater than 0")
    return number


def engine_name(value: str) -> str:
    if value not in ENGINE_CHOICES:
        raise argparse.ArgumentTypeError(
            f"unknown engine {value!r}; choose one of {', '.join(ENGINE_CHOICES)}"
        )
    return value


def server_url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000"
        )
    return value.rstrip("/")
