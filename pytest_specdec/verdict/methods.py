"""The verdict's methods: what each one compares, whether its verdict is provisional, and
what more of it an INCONCLUSIVE verdict would need (``Verdict.runs_needed`` counts it).

- ``welch``: an A/B between the session means of two sessions or more a side;
- ``welch-provisional``: pooled runs (one session a side, or a stored history too short);
- ``prediction-interval``: new sessions against a stored history of five or more;
- ``borrowed-spread``: new sessions against a short history, with the spread between sessions
  of the configs stored beside it (provisional).
"""

from __future__ import annotations

__all__ = ["PROVISIONAL_METHODS", "SESSION_METHODS", "further_cap", "more_unit"]

PROVISIONAL_METHODS = frozenset({"welch-provisional", "borrowed-spread"})
SESSION_METHODS = frozenset({"prediction-interval", "borrowed-spread"})  # against a history
_UNITS = {
    "prediction-interval": "sessions",
    "welch": "sessions per side",
    "welch-provisional": "runs",
    "borrowed-spread": "sessions",
}


def more_unit(method: str | None) -> str:
    """What a verdict's ``runs_needed`` counts for its method (runs where not known)."""
    return _UNITS.get(method or "", "runs")


def further_cap(method: str) -> int:
    """The most further observations ``runs_needed`` looks for: runs, or (dearer) sessions."""
    return 1000 if more_unit(method) == "runs" else 100
