"""Value parsers shared by the pytest options, the ``specdec`` CLI and the bench scripts.

Each parser validates where the value is parsed and raises ``argparse.ArgumentTypeError``
naming the value and the fix (pytest and argparse turn it into a usage error naming the flag).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from pytest_specdec.core.engine_table import ENGINE_NAME, ENGINE_TABLE

# What a verdict judges of each request: "e2e", its output tok/s (its tokens over its wall
# time, time to first token included), or "decode", its decode tok/s (1 / TPOT).
SCORES = ("e2e", "decode")


def _parse_number(value: str, kind: type[int] | type[float], low: float, strict: bool) -> Any:
    """``value`` as ``kind``, at least ``low`` (above it when ``strict``), else a clear error."""
    try:
        number = kind(value)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}; give e.g. 5") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number; give e.g. 5")
    if number < low or (strict and number == low):
        bound = f"greater than {low:g}" if strict else f"at least {low:g}"
        raise argparse.ArgumentTypeError(f"{value!r} must be {bound}")
    return number


def positive_int(value: str) -> int:
    return int(_parse_number(value, int, 1, strict=False))


def non_negative_int(value: str) -> int:
    return int(_parse_number(value, int, 0, strict=False))


def positive_float(value: str) -> float:
    return float(_parse_number(value, float, 0.0, strict=True))


def engine_name(value: str) -> str:
    """An installed engine's name (entry points; a pytest plugin's engines are checked once the
    plugins have registered them, see state.py)."""
    if not ENGINE_NAME.match(value):
        raise argparse.ArgumentTypeError(
            f"engine {value!r}: an engine name is lowercase letters, digits, - and _ "
            f"(installed: {', '.join(ENGINE_TABLE.names())})"
        )
    return value


def engine_args(value: str) -> tuple[str, ...]:
    """Shell-quoted engine flags (``'--attention-backend triton'``) as an argv tail."""
    try:
        args = tuple(shlex.split(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a shell-quoted argument list ({exc}); quote it like "
            "'--attention-backend triton'"
        ) from None
    if args and not args[0].startswith("-"):
        raise argparse.ArgumentTypeError(
            f"{value!r} must start with a flag (e.g. '--disable-cuda-graph'), not {args[0]!r}"
        )
    return args


def server_url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000"
        )
    return value.rstrip("/")


def int_list(value: str) -> tuple[int, ...]:
    """Load levels: distinct client counts of 1 or more, comma-separated (``1,4,16``)."""
    try:
        levels = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma list of whole numbers, e.g. 1,4,16"
        ) from None
    if min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give client counts >= 1, e.g. 1,4,16")
    if len(set(levels)) != len(levels):
        twice = sorted({n for n in levels if levels.count(n) > 1})
        raise argparse.ArgumentTypeError(
            f"{value!r} names {', '.join(map(str, twice))} twice: give each client count once"
        )
    return levels


def rounds(value: str) -> int:
    """Measured rounds per load level: a whole number >= 2 (a confidence interval needs two)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 2:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give a whole number of rounds >= 2 (a level's rounds are what its "
            "confidence interval is made from), e.g. 5"
        )
    return number


def _float_in(value: str, example: str, ok: Callable[[float], bool], fix: str) -> float:
    """``value`` as a float for which ``ok`` holds, else an error with ``fix``."""
    try:
        number = float(value)
    except ValueError:
        msg = f"{value!r} is not a number; give e.g. {example}"
        raise argparse.ArgumentTypeError(msg) from None
    if not ok(number):
        raise argparse.ArgumentTypeError(f"{value!r} {fix}")
    return number


def temperature(value: str) -> float:
    """A sampling temperature: 0 (greedy) to 2."""
    fix = "is outside 0..2; 0 is greedy, speculative configs run at 0.6-1.0"
    return _float_in(value, "0.8", lambda t: 0 <= t <= 2, fix)


def top_p(value: str) -> float:
    """Nucleus sampling mass: in (0, 1]."""
    return _float_in(value, "0.95", lambda p: 0 < p <= 1, "must be in (0, 1]; 1 keeps every token")


def fraction(value: str) -> float:
    """A relative change threshold in [0, 0.5)."""
    return _float_in(value, "0.01", lambda d: 0 <= d < 0.5, "must be in [0, 0.5); e.g. 0.01 for 1%")


def probability(value: str) -> float:
    return _float_in(value, "0.05", lambda a: 0 < a < 0.5, "must be between 0 and 0.5 (exclusive)")


def cpu_list(value: str) -> tuple[int, ...]:
    """CPU core numbers as ``0-3,6``: sorted, each once."""
    cores: set[int] = set()
    for part in (p.strip() for p in value.split(",")):
        low, _, high = part.partition("-")
        if not (low.isdigit() and (not high or high.isdigit())) or (high and int(high) < int(low)):
            raise argparse.ArgumentTypeError(
                f"{value!r}: {part!r} is not a core number or range; give e.g. 0 or 0-3,6"
            )
        cores.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cores))


OUTCOME_NAMES = ("regressed", "inconclusive", "improved", "unchanged")
FAIL_ON_CHOICES = (
    *OUTCOME_NAMES,
    *(f"tok-{o}" for o in OUTCOME_NAMES),
    *(f"accept-{o}" for o in OUTCOME_NAMES),
    *(f"load-{o}" for o in OUTCOME_NAMES),
    "drift",
    "crossover",
)


def fail_on(value: str) -> tuple[str, ...]:
    """Outcomes that fail the run: ``regressed`` covers every verdict (output tok/s, accept
    length, the load levels); ``tok-regressed`` / ``accept-regressed`` / ``load-regressed``
    pick one; ``drift`` adds history drift; ``crossover`` fails where speculation no longer
    pays at a load level where it paid in the baseline."""
    parts = tuple(p.strip().lower() for p in value.split(",") if p.strip())
    bad = [p for p in parts if p not in FAIL_ON_CHOICES]
    if bad or not parts:
        raise argparse.ArgumentTypeError(
            f"{value!r}: unknown outcome(s) {', '.join(bad) or '(none)'}; choose from "
            f"{', '.join(OUTCOME_NAMES)} (every verdict), each also as tok-<outcome>, "
            "accept-<outcome> or load-<outcome> (one verdict), drift and crossover; e.g. "
            "regressed,inconclusive"
        )
    return parts


# A secret's name holds one of these as a word of its own: --api-key, HF_TOKEN, SECRET_KEY;
# not --speculative-num-draft-tokens or TOKENIZERS_PARALLELISM, whose values are settings.
SECRET_NAME = re.compile(
    r"(?<![a-z])(?:api_?key|key|token|secret|password|passwd|credentials?)(?![a-z])", re.IGNORECASE
)


def masked(env: dict[str, str]) -> dict[str, str]:
    """``env`` as it may be recorded: the value of every secret-looking name hidden."""
    return {k: "***" if SECRET_NAME.search(k) else v for k, v in env.items()}
