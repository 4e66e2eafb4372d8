"""The acceptance verdict: did the drafter get worse, whatever tok/s says?

Accept length (tokens per verify step, bonus token included) is judged on its own, beside the
throughput verdict and with the same rules: ln(accept length) per request, sessions as the
unit, a prediction interval against a long enough history, Welch otherwise (provisional), Holm
across configs, its own δ (``VerdictPolicy.accept_delta``, default 1%) and an MDE.

Acceptance noise is learned from the data, never assumed: at temperature 0 most engines repeat
every accept length to the token, and where both sides have exactly zero spread there is no
test to make: a change beyond δ is decided at once, and the verdict says so. Per-position
acceptance rates (the share of drafts whose k-th token was accepted), where the engine reports
them, are compared as diagnosis.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_specdec.verdict.baselines import Baseline
from pytest_specdec.verdict.sessions import (
    accept_runs,
    column_means,
    position_rates,
    session_means,
    sessions_of,
    workload_prompts,
)
from pytest_specdec.verdict.stats import (
    Outcome,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    adjust_verdicts,
    against_history_sessions,
    decision_delta,
    welch_log,
)
from pytest_specdec.verdict.suite import suite_values

JUDGED = "judged"
NO_DATA = "no-data"
EXACT = "exact"  # the method of a verdict decided without a test (zero noise on both sides)


@dataclass
class AcceptJudgement:
    """The acceptance verdict of one config: suite score (geometric mean over the prompts with
    an accept length) as the gate, per-prompt verdicts and per-position rates as diagnosis."""

    status: str  # judged | no-data
    message: str
    suite: Verdict | None = None
    prompts: dict[str, Verdict] = field(default_factory=dict)
    positions: list[dict[str, float | None]] = field(default_factory=list)
    noise: str | None = None  # how the noise was known: zero, or the spread measured
    excluded: list[str] = field(default_factory=list)  # prompts without an accept length

    @property
    def outcome(self) -> str:
        return self.suite.outcome.value if self.suite else self.status.upper()

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.outcome,
            "status": self.status,
            "message": self.message,
            "suite": self.suite.to_dict() if self.suite else None,
            "prompts": {p: v.to_dict() for p, v in self.prompts.items()},
            "positions": self.positions,
            "noise": self.noise,
            "excluded": self.excluded,
        }

    def explain(self) -> AcceptJudgement:
        if self.suite is not None:
            self.message = f"accept length {self.suite.explanation}"
            if self.noise:
                self.message += f"; noise: {self.noise}"
            moved = [
                f"position {i + 1} {p['change']:+.1%}"
                for i, p in enumerate(self.positions)
                if p.get("change") is not None and abs(float(p["change"] or 0)) >= 0.01
            ]
            if moved:
                self.message += f"; acceptance rate per draft position: {', '.join(moved)}"
        return self


# --------------------------------------------------------------------------- reading runs


def _suite(runs: Mapping[str, Sequence[float]]) -> list[float]:
    n = min((len(v) for v in runs.values()), default=0)
    return suite_values({p: list(v)[:n] for p, v in runs.items()}) if n else []


def _flat(sessions: Sequence[Sequence[float]]) -> list[float]:
    return [v for s in sessions for v in s]


def _constant(values: Sequence[float]) -> bool:
    return bool(values) and max(values) - min(values) <= 1e-12 * max(values)


# ------------------------------------------------------------------------------ deciding


def exact_verdict(new: float, ref: float, policy: VerdictPolicy, n: tuple[int, int]) -> Verdict:
    """Both sides repeat one value exactly (``n``: how many times each): no noise, so no
    test; |change| ≥ δ decides."""
    ratio, delta = new / ref, policy.min_delta
    if ratio < 1 and 1 - ratio >= delta:
        outcome = Outcome.REGRESSED
    elif ratio > 1 and ratio - 1 >= delta:
        outcome = Outcome.IMPROVED
    else:
        outcome = Outcome.UNCHANGED
    below = outcome is Outcome.UNCHANGED
    text = (
        f"{outcome.value}: {ratio:.3f}x ({new:.3f} vs {ref:.3f}), exact: every request on both "
        f"sides repeated its accept length, so the noise is zero and no test is needed; change "
        f"{ratio - 1:+.1%} {'inside' if below else 'beyond'} ±δ {delta:.1%}"
    )
    p_r = 0.0 if ratio < 1 and not below else 1.0
    p_i = 0.0 if ratio > 1 and not below else 1.0
    return Verdict(
        outcome, ratio, ratio, ratio, p_r, p_i, None, 0.0, n[0], n[1], delta, 0.0, EXACT, False,
        None,
        text, policy.alpha, policy.ci_level, 0.0, 0.0,
    )  # fmt: skip


def _exact(new: list[list[float]], ref: list[list[float]], policy: VerdictPolicy) -> Verdict:
    a, b = _flat(new), _flat(ref)
    return exact_verdict(a[0], b[0], policy, (len(a), len(b)))


def accept_policy(policy: VerdictPolicy) -> VerdictPolicy:
    """The throughput policy with acceptance's own δ."""
    return replace(policy, min_delta=policy.accept_delta)


def _ab(new: list[list[float]], ref: list[list[float]], policy: VerdictPolicy) -> Verdict:
    """A/B: session means when both sides have two sessions or more, else the runs."""
    new, ref = [s for s in new if s], [s for s in ref if s]
    if _constant(_flat(new)) and _constant(_flat(ref)):
        return exact_verdict(
            _flat(new)[0], _flat(ref)[0], policy, (len(_flat(new)), len(_flat(ref)))
        )
    if len(new) >= 2 and len(ref) >= 2:
        return welch_log(session_means(new), session_means(ref), policy)
    return welch_log(_flat(new), _flat(ref), policy, provisional=True)


def _history(new: list[list[float]], history: list[list[float]], policy: VerdictPolicy) -> Verdict:
    """New sessions against the stored ones (each a list of accept lengths)."""
    new, history = [s for s in new if s], [s for s in history if s]
    if _constant(_flat(new)) and _constant(_flat(history)):
        return _exact(new, history, policy)
    if len(history) >= policy.min_history:
        summaries = [SessionSummary.from_values(s) for s in history]
        return against_history_sessions([SessionSummary.from_values(s) for s in new], summaries,
                                        policy)  # fmt: skip
    return welch_log(_flat(new), _flat(history), policy, provisional=True)


def _noise(groups: Sequence[Sequence[Sequence[float]]], policy: VerdictPolicy) -> str:
    """What the sessions say about acceptance noise, in words. ``groups``: the sessions of each
    side that measured the same thing (the history; or each side of an A/B)."""
    sessions = [s for g in groups for s in g if s]
    if all(_constant(_flat(g)) for g in groups if _flat(g)):
        count = sum(len(s) for s in sessions)
        return f"zero: all {count} run(s) in {len(sessions)} session(s) gave the same values"
    within = [statistics.stdev(math.log(v) for v in s) for s in sessions if len(s) >= 2]
    text = f"within-session CV {statistics.fmean(within):.1%}" if within else "within unknown"
    spreads = [_between(g) for g in groups if len([s for s in g if s]) >= 2]
    if spreads:
        between = math.sqrt(statistics.fmean(spreads))
        text += f", between-session CV {between:.1%} over {len(sessions)} sessions"
        text += f" (δ {decision_delta(policy, between):.1%})"
    return text


def _between(sessions: Sequence[Sequence[float]]) -> float:
    """Variance of the session means in log space beyond what within-session noise explains."""
    summaries = [SessionSummary.from_values(s) for s in sessions if s]
    means = [x.mean_log for x in summaries]
    return max(0.0, statistics.variance(means) - statistics.fmean(x.sd_log**2 / x.n
                                                                   for x in summaries))  # fmt: skip


# ------------------------------------------------------------------------------ judging

Sides = tuple[list[list[float]], list[list[float]]]  # (new sessions, reference sessions)


def _positions(new: Sequence[float], ref: Sequence[float]) -> list[dict[str, float | None]]:
    """Per draft position: the acceptance rate on each side and its relative change."""
    out: list[dict[str, float | None]] = []
    for k in range(max(len(new), len(ref))):
        a = new[k] if k < len(new) else None
        b = ref[k] if k < len(ref) else None
        out.append({"new": a, "reference": b, "change": a / b - 1 if a is not None and b else None})
    return out


def _suite_sessions(per_prompt: Mapping[str, Sides], side: int) -> list[list[float]]:
    """Per session, the per-run suite scores over the included prompts (sessions where every
    prompt has accept lengths)."""
    counts = {len(sides[side]) for sides in per_prompt.values()}
    out = []
    for i in range(min(counts, default=0)):
        runs = {p: sides[side][i] for p, sides in per_prompt.items()}
        if all(runs.values()):
            out.append(_suite(runs))
    return out


def _finish(
    judgement: AcceptJudgement, per_prompt: Mapping[str, Sides], decide: Any, history: bool,
    policy: VerdictPolicy,
) -> AcceptJudgement:  # fmt: skip
    judgement.prompts = {p: decide(*sides, policy) for p, sides in per_prompt.items()}
    new, ref = _suite_sessions(per_prompt, 0), _suite_sessions(per_prompt, 1)
    if not new or not ref:
        judgement.status = NO_DATA
        judgement.message = "accept length: not judged: no session has one on every prompt"
        return judgement
    judgement.suite = decide(new, ref, policy)
    judgement.noise = _noise([ref] if history else [ref, new], policy)
    return judgement.explain()


def _no_data(new: Mapping[str, Sequence[float]], ref_has: bool) -> AcceptJudgement:
    if not any(new.values()):
        why = "this config reports no accept length (no speculation, or the engine gives none)"
    elif not ref_has:
        why = "the reference has no accept length to compare with"
    else:
        why = "no prompt has an accept length on both sides"
    return AcceptJudgement(NO_DATA, f"accept length: not judged: {why}")


def _new_sessions(config: Mapping[str, Any], prompt: str) -> list[list[float]]:
    return [accept_runs(config, [prompt], s)[prompt] for s in sessions_of(config)]


def judge_accept_reference(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    policy: VerdictPolicy,
) -> AcceptJudgement:
    """A/B in one run: this config's accept lengths against the reference config's."""
    prompts = workload_prompts(results)
    new_all, ref_all = accept_runs(config, prompts), accept_runs(reference, prompts)
    included = [p for p in prompts if new_all[p] and ref_all[p]]
    if not included:
        return _no_data(new_all, any(ref_all.values()))
    per_prompt = {p: (_new_sessions(config, p), _new_sessions(reference, p)) for p in included}
    judgement = AcceptJudgement(JUDGED, "", excluded=[p for p in prompts if p not in included])
    judgement.positions = _positions(
        position_rates(config, included), position_rates(reference, included)
    )
    return _finish(judgement, per_prompt, _ab, False, accept_policy(policy))


def history_accept_runs(baseline: Baseline, prompt: str) -> list[list[float]]:
    """Per stored session, the accept lengths of a prompt: the per-request values where the
    session kept them, else its mean (sessions stored before they were kept), else none."""
    out = []
    for session in baseline.sessions:
        cell = (session.get("prompts") or {}).get(prompt) or {}
        runs = cell.get("accept_runs")
        if runs:
            out.append([float(v) for v in runs])
        else:
            out.append([float(cell["accept_length"])] if cell.get("accept_length") else [])
    return out


def history_positions(baseline: Baseline, prompts: Sequence[str]) -> list[float]:
    rows = [
        cell["accept_positions"]
        for s in baseline.sessions
        for p in prompts
        if (cell := (s.get("prompts") or {}).get(p) or {}).get("accept_positions")
    ]
    return column_means(rows)


def judge_accept_history(
    results: Mapping[str, Any], config: Mapping[str, Any], baseline: Baseline,
    policy: VerdictPolicy,
) -> AcceptJudgement:  # fmt: skip
    """This run's sessions against the stored sessions of the config's baseline key."""
    prompts = workload_prompts(results)
    new_all = accept_runs(config, prompts)
    stored = {p: history_accept_runs(baseline, p) for p in prompts}
    included = [p for p in prompts if new_all[p] and any(stored[p])]
    if not included:
        return _no_data(new_all, any(any(v) for v in stored.values()))
    per_prompt = {p: (_new_sessions(config, p), stored[p]) for p in included}
    judgement = AcceptJudgement(JUDGED, "", excluded=[p for p in prompts if p not in included])
    judgement.positions = _positions(
        position_rates(config, included), history_positions(baseline, included)
    )
    return _finish(judgement, per_prompt, _history, True, accept_policy(policy))


def adjust_accept(judgements: Sequence[AcceptJudgement], policy: VerdictPolicy) -> None:
    """Holm across the configs' acceptance verdicts (in place); exact verdicts need none."""
    tested = [j for j in judgements if j.suite is not None and j.suite.method != EXACT]
    if not tested:
        return
    adjusted = adjust_verdicts([j.suite for j in tested if j.suite], accept_policy(policy))
    for j, v in zip(tested, adjusted, strict=True):
        j.suite = v
        j.explain()


def accept_summary_lines(name: str, judgement: AcceptJudgement | None) -> list[str]:
    """The acceptance lines of one config for the terminal and reports."""
    if judgement is None:
        return []
    out = [f"{name}: {judgement.message}"]
    for prompt, v in judgement.prompts.items():
        if v.outcome is not Outcome.UNCHANGED:
            out.append(f"{name}/{prompt}: accept length {v.explanation}")
    if judgement.excluded and judgement.suite is not None:
        out.append(f"{name}: accept length not reported for {', '.join(judgement.excluded)}")
    return out


def short(acceptance: Mapping[str, Any] | None) -> str:
    """The acceptance cell of a verdict table, from ``AcceptJudgement.to_dict()``: outcome,
    change, and "exact" where no test was needed; "-" when nothing was judged."""
    v = (acceptance or {}).get("suite") or {}
    if not v:
        return "-"
    tag = " (provisional)" if v.get("provisional") else ""
    how = " exact" if v.get("method") == EXACT else ""
    return f"{v['outcome']}{tag} {v['ratio'] - 1:+.1%}{how}"


__all__ = [
    "AcceptJudgement",
    "accept_runs",
    "accept_summary_lines",
    "adjust_accept",
    "exact_verdict",
    "judge_accept_history",
    "judge_accept_reference",
    "short",
]
