"""What ``specdec bisect`` prints: the first bad candidate with its ratio CI, accept-length
change and cause, the table of steps, the device minutes spent against a linear scan's
estimate, and the same as JSON (``first_bad`` null when nothing regressed)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.bisect.run import FOUND, Conclusion, Search
from pytest_specdec.bisect.step import BAD_ENDPOINT, CANDIDATE, Check, StepRecord
from pytest_specdec.report.table import render_table


def linear_scan_seconds(search: Search, steps: Sequence[StepRecord]) -> float | None:
    """Every candidate between the endpoints measured against the good one, each at the mean
    cost (good + candidate sessions) of this bisect's candidate comparisons."""
    costs = []
    for step in steps:
        check = step.check(CANDIDATE)
        if check is not None:
            costs.append(step.good_seconds + check.seconds)
    inner = search.bad - search.good - 1
    return statistics.fmean(costs) * inner if costs and inner > 0 else None


def cost(search: Search, steps: Sequence[StepRecord], device: str) -> dict[str, Any]:
    linear = linear_scan_seconds(search, steps)
    return {
        "device": device,
        "minutes": sum(s.seconds for s in steps) / 60,
        "sessions": sum(s.sessions for s in steps),
        "linear_scan_minutes": linear / 60 if linear is not None else None,
        "inner_candidates": search.bad - search.good - 1,
    }


def _first_bad(search: Search, done: Conclusion) -> dict[str, Any] | None:
    if done.status != FOUND or done.first_bad is None:
        return None
    return {"name": done.first_bad, "index": search.names.index(done.first_bad),
            **(done.verdict or {})}  # fmt: skip


def to_json(
    search: Search, done: Conclusion, steps: Sequence[StepRecord], device: str
) -> dict[str, Any]:
    return {
        "status": done.status,
        "reason": done.reason,
        "first_bad": _first_bad(search, done),
        "suspects": done.suspects,
        "good": search.names[search.good],
        "bad": search.names[search.bad],
        "steps": [{**s.to_dict(), "seconds": s.seconds, "sessions": s.sessions} for s in steps],
        "cost": cost(search, steps, device),
    }


def _ratio(check: Check | None) -> str:
    v = (check.verdict or {}) if check else {}
    if v.get("ratio") is None:
        return "-"
    high = f"{v['ci_high']:.3f}" if v.get("ci_high") is not None else "inf"
    return f"{v['ratio']:.3f} [{v['ci_low']:.3f}, {high}]"


def _placement(check: Check | None) -> dict[str, Any]:
    return ((check.verdict or {}).get("placement") or {}) if check else {}


def _outcome(check: Check | None) -> str:
    if check is None:
        return "-"
    where = _placement(check)
    nearest = ""
    if where.get("by_nearest"):
        nearest = f", at the last look: two-point error {where['error']:.1g}"
    return f"{check.outcome or 'not judged'} ({check.sessions} sessions{nearest})"


def _position(check: Check | None) -> str:
    """Where the candidate lies in the step: 0 at the good candidate, 1 at the bad endpoint."""
    where = _placement(check)
    if where.get("position") is None:
        return "-"
    return f"{where['position']:.2f} (p {where['p']:.2g})"


def rows(steps: Sequence[StepRecord]) -> list[list[str]]:
    out = [["step", "candidate", "placed", "ratio [CI]", "position", "mark", "bad endpoint",
            "bad ratio [CI]", "minutes"]]  # fmt: skip
    for s in steps:
        cand, bad = s.check(CANDIDATE), s.check(BAD_ENDPOINT)
        bad_name = f"{bad.name}: {_outcome(bad)}" if bad else "-"
        out.append([str(s.index), cand.name if cand else "-", _outcome(cand), _ratio(cand),
                    _position(cand), cand.mark if cand else "-", bad_name, _ratio(bad),
                    f"{s.seconds / 60:.1f}"])  # fmt: skip
    return out


def _accept_text(first: Mapping[str, Any]) -> str:
    """The accept-length change, or what each side reports where only one speculates."""
    change, new, ref = (first.get(k) for k in ("accept_change", "accept_new", "accept_reference"))
    if change is not None:
        return f"{change:+.1%} ({ref:.2f} → {new:.2f})" if new and ref else f"{change:+.1%}"
    if new is not None:
        return f"{new:.2f} tokens per verify step; the good candidate reports none"
    if ref is not None:
        return f"none reported; the good candidate's was {ref:.2f}"
    return "not reported by either candidate"


def _headline(search: Search, done: Conclusion) -> list[str]:
    first = _first_bad(search, done)
    if first is None:
        word = "no first bad candidate" if done.status != "undecided" else "undecided"
        return [f"{word}: {done.reason}"]
    lines = [f"first bad: {first['name']} (#{first['index'] + 1}): {done.reason}"]
    if first.get("ratio") is not None:
        level = f"{first['ci_level']:.0%}" if first.get("ci_level") else ""
        high = first["ci_high"] if first.get("ci_high") is not None else float("inf")
        ci = f"{level} CI {first['ci_low']:.3f}-{high:.3f}"
        lines.append(f"  ratio {first['ratio']:.3f} ({ci}) against the good candidate")
    lines.append(f"  accept length {_accept_text(first)}")
    lines.append(f"  cause: {first.get('cause') or 'not named'}")
    if first.get("explanation"):
        lines.append(f"  {first['explanation']}")
    return lines


def render(search: Search, done: Conclusion, steps: Sequence[StepRecord], device: str) -> str:
    c = cost(search, steps, device)
    linear = c["linear_scan_minutes"]
    spent = (
        f"{device} minutes: {c['minutes']:.1f} in {len(steps)} step(s), {c['sessions']} "
        f"server sessions; a linear scan of the {c['inner_candidates']} candidate(s) between "
        + (f"the endpoints: ~{linear:.1f}" if linear is not None else "the endpoints: -")
    )
    skipped = [
        f"skipped {c.name} at step {s.index}: {c.detail or c.outcome}"
        for s in steps for c in s.checks if c.role == CANDIDATE and c.mark == "skip"
    ]  # fmt: skip
    skipped += [
        f"{c.name} (step {s.index}) was placed at the last look on its two-point error "
        f"({where['error']:.1g}), not at the plan's alpha: a larger --max-sessions would make "
        "it firmer"
        for s in steps for c in s.checks
        if c.role == CANDIDATE and (where := _placement(c)).get("by_nearest")
    ]  # fmt: skip
    return "\n".join([*_headline(search, done), "", render_table(rows(steps)), "", spent,
                      *skipped])  # fmt: skip
