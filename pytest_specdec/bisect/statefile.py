"""The bisect's state file: what it was asked (the fingerprint) and every finished step.

Written atomically after each step (a temp file renamed over the old one), so an interrupted
bisect resumes after its last finished step; a state file written for another bisect is
refused, naming what differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_specdec.bisect.candidates import BisectError
from pytest_specdec.bisect.step import StepRecord
from pytest_specdec.core.results import atomic_write_json

SCHEMA = 1


def load_steps(path: Path, fingerprint: Mapping[str, Any]) -> list[StepRecord]:
    """The finished steps of an earlier run of the same bisect; [] when there is none."""
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an object")
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, expected {SCHEMA}")
        before, found = doc["fingerprint"], doc["steps"]
        if not isinstance(before, dict):
            raise ValueError(f"'fingerprint' is a {type(before).__name__}, not an object")
        if not isinstance(found, list) or not all(isinstance(s, dict) for s in found):
            raise ValueError("'steps' must be a list of objects")
        steps = [StepRecord.from_dict(s) for s in found]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BisectError(
            f"state file {path} cannot be read ({exc}); remove it to start the bisect afresh"
        ) from None
    differ = sorted(k for k in {*before, *fingerprint} if before.get(k) != fingerprint.get(k))
    if differ:
        raise BisectError(
            f"state file {path} belongs to another bisect (it differs in: {', '.join(differ)}); "
            "rerun with the same arguments to resume it, or pass another --out-dir (or remove "
            "the file) to start a new one"
        )
    return steps


def save_steps(
    path: Path, fingerprint: Mapping[str, Any], steps: list[StepRecord], device: str
) -> None:
    atomic_write_json(path, {
        "schema": SCHEMA,
        "fingerprint": dict(fingerprint),
        "device": device,
        "steps": [s.to_dict() for s in steps],
    })  # fmt: skip
