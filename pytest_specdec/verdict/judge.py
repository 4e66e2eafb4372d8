"""Verdicts for measured configs: against the stored baseline history, or A/B in one run.

Works on results documents (dicts), so pytest, ``specdec compare`` and ``specdec baseline``
share it. The suite score (geometric mean over prompts) is the gate; per-prompt verdicts are
diagnosis. Holm's adjustment runs across the configs of one run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdec.verdict.acceptance import (
    AcceptJudgement,
    judge_accept_history,
    judge_accept_reference,
)
from pytest_specdec.verdict.baselines import (
    Baseline,
    baseline_path,
    key_for,
    key_mismatch,
    load_baseline,
)
from pytest_specdec.verdict.sessions import (
    accept_means,
    by_session,
    empty_prompts,
    prompt_runs,
    score_of,
    session_means,
    suite_runs,
    unmeasured_prompts,
    workload_prompts,
)
from pytest_specdec.verdict.stats import (
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_sessions,
    welch_log,
)

NO_BASELINE = "no-baseline"
MISMATCH = "mismatch"
JUDGED = "judged"
UNJUDGEABLE = "unjudgeable"
PARTIAL = "partial"


@dataclass
class Judgement:
    """Everything said about one config: the gate verdict, per-prompt diagnosis, context."""

    config: str
    status: str
    message: str
    against: str  # "baseline <path>" or "reference <config>"
    suite: Verdict | None = None
    prompts: dict[str, Verdict] = field(default_factory=dict)
    accept: dict[str, dict[str, float | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cause: str | None = None  # drafter | kernel | both | target | speculation (see attribute)
    cause_text: str | None = None
    acceptance: AcceptJudgement | None = None  # the accept-length verdict beside tok/s
    score: str = "e2e"  # what tok/s means here: sessions.SCORES

    @property
    def outcome(self) -> str:
        return self.suite.outcome.value if self.suite else self.status.upper()

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "status": self.status,
            "message": self.message,
            "against": self.against,
            "outcome": self.outcome,
            "suite": self.suite.to_dict() if self.suite else None,
            "prompts": {p: v.to_dict() for p, v in self.prompts.items()},
            "accept": self.accept,
            "notes": self.notes,
            "cause": self.cause,
            "cause_text": self.cause_text,
            "acceptance": self.acceptance.to_dict() if self.acceptance else None,
            "score": self.score,
        }

    def explain(self) -> Judgement:
        """Set the message from the suite verdict and the cause of the change (in place)."""
        if self.suite is not None:
            self.cause, self.cause_text = attribute(self.suite, self.accept)
            tail = f"; {self.cause_text}" if self.cause_text else ""
            self.message = self.suite.explanation + tail
        return self


def _accept_change(
    new: Mapping[str, float | None], old: Mapping[str, float | None]
) -> dict[str, dict[str, float | None]]:
    out = {}
    for p, value in new.items():
        before = old.get(p)
        change = value / before - 1 if value and before else None
        out[p] = {"new": value, "reference": before, "change": change}
    return out


ACCEPT_TOLERANCE = 0.02  # accept lengths within ±2% count as unchanged


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
    facts = f"accept length {accept_ratio - 1:+.1%}, verify steps/s {step - 1:+.1%}"
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


def judge_reference(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    policy: VerdictPolicy,
) -> Judgement:
    """A/B within one run: Welch t on ln tok/s between two configs' runs."""
    prompts = workload_prompts(results)
    score = score_of(results)
    new = prompt_runs(config, prompts, score=score)
    ref = prompt_runs(reference, prompts, score=score)
    against = f"reference {reference['name']}"
    judgement = Judgement(config["name"], JUDGED, "", against, score=score)
    partial = unmeasured_prompts(config, prompts) or unmeasured_prompts(reference, prompts)
    if partial:
        judgement.status, judgement.message = PARTIAL, partial
        return judgement
    problem = empty_prompts(new, score) or empty_prompts(ref, score)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    new_s, ref_s = by_session(config, prompts, score), by_session(reference, prompts, score)
    if len(new_s) >= 2 and len(ref_s) >= 2:  # sessions are the unit: Welch on session means

        def compare(a: list[list[float]], b: list[list[float]]) -> Verdict:
            return welch_log(session_means(a), session_means(b), policy)
    else:
        judgement.notes.append(
            "one server session per side: between-session noise is not measured, so the "
            "verdict is provisional; --specdec-sessions 3 gives a reliable A/B"
        )

        def compare(a: list[list[float]], b: list[list[float]]) -> Verdict:
            flat = [[v for s in a for v in s], [v for s in b for v in s]]
            return welch_log(flat[0], flat[1], policy, provisional=True)

    judgement.prompts = {p: compare([s[p] for s in new_s], [s[p] for s in ref_s]) for p in prompts}
    judgement.suite = compare([suite_runs(s) for s in new_s], [suite_runs(s) for s in ref_s])
    judgement.accept = _accept_change(
        accept_means(config, prompts), accept_means(reference, prompts)
    )
    judgement.acceptance = judge_accept_reference(results, config, reference, policy)
    return judgement.explain()


def _history_accept(baseline: Baseline, prompts: Sequence[str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in prompts:
        values = [
            float(s["prompts"][p]["accept_length"])
            for s in baseline.sessions
            if p in s.get("prompts", {}) and s["prompts"][p].get("accept_length")
        ]
        out[p] = statistics.fmean(values) if values else None
    return out


def _history_verdict(
    new: Sequence[Sequence[float]],
    history: Sequence[SessionSummary],
    raw: Sequence[float],
    policy: VerdictPolicy,
) -> Verdict:
    """New sessions (lists of tok/s) against the stored history of session summaries."""
    if len(history) >= policy.min_history:
        summaries = [SessionSummary.from_values(values) for values in new]
        return against_history_sessions(summaries, history, policy)
    # Fewer sessions than a prediction interval needs: Welch against the stored raw runs.
    return welch_log([v for s in new for v in s], raw, policy, provisional=True)


def engine_env_change(session: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
    """The engine-relevant environment variables that differ from the latest baseline session
    (e.g. ``LLAMA_ARG_UBATCH``): they change an engine without changing a flag or the key."""
    before = session.get("engine_env")
    now = (config.get("extra") or {}).get("engine_env")
    if before is None or now is None:
        return None  # not recorded on one side (older files, external servers, containers)
    changed = [
        f"{k}: {before.get(k, 'unset')!s} → {now.get(k, 'unset')!s}"
        for k in sorted(set(before) | set(now))
        if before.get(k) != now.get(k)
    ]
    if not changed:
        return None
    return "engine environment differs from the latest baseline session: " + "; ".join(changed)


def _comparable_baseline(
    judgement: Judgement, results: Mapping[str, Any], config: Mapping[str, Any], root: Path,
    allow_mismatch: bool,
) -> Baseline | None:  # fmt: skip
    """The config's baseline, with notes on what changed since; None (and ``judgement``
    closed as NO_BASELINE or MISMATCH) when there is none to compare with."""
    key = key_for(results, config)
    path = baseline_path(root, key)
    judgement.notes.append(f"baseline file {path}")
    baseline = load_baseline(path)  # BaselineError propagates: a corrupt file is an error
    if baseline is None or not baseline.sessions:
        judgement.status = NO_BASELINE
        judgement.message = (
            f"no baseline for {config['name']} at {path} (hardware {key['hardware'].get('name')}, "
            f"engine {key['engine']}); run with --specdec-update-baselines"
        )
        return None
    judgement.against = f"baseline ({len(baseline.sessions)} sessions)"
    diff = key_mismatch(baseline.key, key)
    if diff and not allow_mismatch:
        judgement.status = MISMATCH
        judgement.message = (
            f"baseline {path} was measured under another key: {'; '.join(diff)}; "
            "refusing to compare (pass --specdec-allow-mismatch to force)"
        )
        return None
    if diff:
        judgement.notes.append(f"FORCED comparison across differing key fields: {'; '.join(diff)}")
    if baseline.key.get("engine_version") != key.get("engine_version"):
        judgement.notes.append(
            f"engine version {baseline.key.get('engine_version')} → {key.get('engine_version')}"
        )
    env_change = engine_env_change(baseline.sessions[-1], config)
    if env_change:
        judgement.notes.append(env_change)
    return baseline


def judge_baseline(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    root: Path,
    policy: VerdictPolicy,
    allow_mismatch: bool = False,
) -> Judgement:
    """Against the stored history of this config's baseline key."""
    prompts = workload_prompts(results)
    score = score_of(results)
    judgement = Judgement(config["name"], JUDGED, "", "baseline", score=score)
    baseline = _comparable_baseline(judgement, results, config, root, allow_mismatch)
    if baseline is None:
        return judgement
    partial = unmeasured_prompts(config, prompts)
    if partial:
        judgement.status, judgement.message = PARTIAL, partial
        return judgement
    new = prompt_runs(config, prompts, score=score)
    problem = empty_prompts(new, score)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    new_s = by_session(config, prompts, score)
    judgement.prompts = {
        p: _history_verdict(
            [s[p] for s in new_s], baseline.prompt_history(p), baseline.raw_runs(p), policy
        )
        for p in prompts
        if baseline.prompt_history(p)
    }
    judgement.suite = _history_verdict(
        [suite_runs(s) for s in new_s], baseline.suite_history(), baseline.raw_runs(None), policy
    )
    judgement.accept = _accept_change(
        accept_means(config, prompts), _history_accept(baseline, prompts)
    )
    judgement.acceptance = judge_accept_history(results, config, baseline, policy)
    return judgement.explain()
