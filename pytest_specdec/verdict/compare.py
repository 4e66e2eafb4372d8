"""Comparisons every verdict makes the same way, whatever it judges (a prompt, the suite score,
a load level): new server sessions against a stored history, two configs' sessions against each
other, and why a change happened (the drafter or the kernels)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from pytest_specdec.verdict.baselines import Baseline
from pytest_specdec.verdict.sessions import session_means
from pytest_specdec.verdict.stats import (
    SessionSummary,
    Spread,
    Verdict,
    VerdictPolicy,
    against_history_borrowed,
    against_history_sessions,
    pooled_spread,
    welch_log,
)

ONE_SESSION_NOTE = (
    "one server session per side: between-session noise is not measured, so the verdict is "
    "provisional; --specdec-sessions 3 gives a reliable A/B"
)


def session_verdict(
    new: Sequence[Sequence[float]], ref: Sequence[Sequence[float]], policy: VerdictPolicy
) -> Verdict:
    """A/B between two configs' server sessions (each a list of values): with two sessions or
    more a side, Welch on the session means (sessions are the unit); else Welch on the pooled
    values, provisional."""
    if len(new) >= 2 and len(ref) >= 2:
        return welch_log(session_means(new), session_means(ref), policy)
    flat_new, flat_ref = [v for s in new for v in s], [v for s in ref for v in s]
    return welch_log(flat_new, flat_ref, policy, provisional=True)


def history_verdict(
    new: Sequence[Sequence[float]],
    history: Sequence[SessionSummary],
    raw: Sequence[float],
    policy: VerdictPolicy,
    spread: Spread | None = None,
) -> Verdict:
    """New sessions (lists of tok/s) against the stored history of session summaries; a
    history shorter than ``policy.min_history`` with the ``spread`` of other configs' sessions
    where one is known (provisional either way)."""
    if len(history) >= policy.min_history:
        summaries = [SessionSummary.from_values(values) for values in new]
        return against_history_sessions(summaries, history, policy)
    if spread is not None:
        summaries = [SessionSummary.from_values(values) for values in new if values]
        return against_history_borrowed(summaries, history, spread, policy)
    # Fewer sessions than a prediction interval needs: Welch against the stored raw runs.
    return welch_log([v for s in new for v in s], raw, policy, provisional=True)


def borrowed_spread(
    history: Sequence[SessionSummary], lenders: Callable[[], Sequence[Baseline]],
    cell: Callable[[Baseline], Sequence[SessionSummary]], policy: VerdictPolicy,
) -> Spread | None:  # fmt: skip
    """The spread a history shorter than ``policy.min_history`` borrows: the ``cell`` (the
    same prompt, suite score or level) of each of the configs stored beside it (``lenders``,
    read only now), pooled where it holds ``min_history`` sessions or more, with the history's
    own from two; None for a long enough history, or none to borrow. A lender whose stored
    cell cannot be read lends nothing (judging its own config reports the file)."""
    if len(history) >= policy.min_history:
        return None
    groups = []
    for lender in lenders():
        try:
            groups.append((str(lender.key.get("config")), cell(lender)))
        except (ValueError, KeyError, TypeError, ArithmeticError):
            continue
    return pooled_spread(groups, policy.min_history, own=history)


ACCEPT_TOLERANCE = 0.02  # accept lengths within ±2% count as unchanged


def factor_facts(ratio: float, accept_ratio: float) -> str:
    """``accept length +0.0%, verify steps/s -6.1%``: a tok/s ratio split into its two factors."""
    return f"accept length {accept_ratio - 1:+.1%}, verify steps/s {ratio / accept_ratio - 1:+.1%}"


def attribute(
    verdict: Verdict, accept: Mapping[str, Mapping[str, float | None]]
) -> tuple[str | None, str | None]:
    """Why the suite score moved: the drafter (accept length), the kernels (speed per verify
    step), both, or the target's own decoding (no speculation). Output tok/s factors exactly
    into accept length x verify steps per second, so the ratio splits into the two.

    Returns ``(cause, sentence)``; ``(None, None)`` when nothing moved or nothing is known."""
    pairs = [(a.get("new"), a.get("reference")) for a in accept.values()]
    both = [(n, r) for n, r in pairs if n and r]
    new_only = [n for n, r in pairs if n and not r]
    if not both and not new_only:
        if verdict.outcome.value in ("REGRESSED", "IMPROVED"):
            return "target", (
                "cause: no accept length on either side (no speculation, or the engine reports "
                "none), so decoding itself changed: kernels, engine or host, not a drafter"
            )
        return None, None
    if not both:  # speculation against plain decoding (e.g. --specdec-reference baseline)
        mean_accept = math.exp(statistics.fmean(math.log(n) for n in new_only))
        step = verdict.ratio / mean_accept
        return "speculation", (
            f"speculation: {mean_accept:.2f} tokens per verify step, each step costing "
            f"{1 / step:.2f} plain decode steps (verify steps/s x{step:.3f})"
        )
    accept_ratio = math.exp(statistics.fmean(math.log(n / r) for n, r in both))
    step = verdict.ratio / accept_ratio
    moved = verdict.outcome.value in ("REGRESSED", "IMPROVED")
    facts = factor_facts(verdict.ratio, accept_ratio)
    if abs(accept_ratio - 1) < ACCEPT_TOLERANCE:
        if not moved:
            return None, f"accept length unchanged ({facts})"
        pace = "slower" if step < 1 else "faster"
        return "kernel", (
            f"cause: kernel side: accept length unchanged ({facts}), so each verify step "
            f"(drafting + verification) got {pace}: not the drafter"
        )
    if not moved:
        return None, f"accept length moved ({facts}) without a decided change in tok/s"
    against = math.log(step) * math.log(verdict.ratio) < 0  # the steps moved the other way
    if against and math.log(accept_ratio) * math.log(verdict.ratio) > 0:
        fewer, pace = ("fewer", "cheaper") if accept_ratio < 1 else ("more", "dearer")
        return "drafter", (
            f"cause: drafter: {fewer} drafted tokens are accepted per step ({facts}); each step "
            f"got {pace}, which made up part of it: not the kernels"
        )
    if math.log(accept_ratio) * math.log(verdict.ratio) < 0 and not against:
        pace = "slower" if step < 1 else "faster"
        return "kernel", (
            f"cause: kernel side: each verify step got {pace} ({facts}), against the accept "
            "length, which moved the other way: not the drafter"
        )
    if abs(math.log(step)) < abs(math.log(accept_ratio)) / 3:
        fewer = "fewer" if accept_ratio < 1 else "more"
        return "drafter", (
            f"cause: drafter: the accept length explains the change ({facts}): {fewer} drafted "
            "tokens are accepted per step, while a step costs what it did"
        )
    return "both", f"cause: drafter and kernel side both moved ({facts})"
