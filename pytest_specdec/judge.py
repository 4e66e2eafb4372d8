"""Verdicts for measured configs: against the stored baseline history, or A/B in one run.

Works on results documents (dicts), so pytest, ``specdec compare`` and ``specdec baseline``
share it. The suite score (geometric mean over prompts) is the gate; per-prompt verdicts are
diagnosis. Holm's adjustment runs across the configs of one run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_specdec.baselines import (
    Baseline,
    BaselineError,
    append_session,
    baseline_path,
    key_for,
    key_mismatch,
    load_baseline,
    session_entry,
)
from pytest_specdec.stats import (
    Outcome,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    adjust_verdicts,
    against_history_sessions,
    suite_values,
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
        }


def prompt_runs(
    config: Mapping[str, Any], prompts: Sequence[str], session: int | None = None
) -> dict[str, list[float]]:
    """Measured, successful tok/s per prompt (failed runs are errors, never numbers)."""
    out: dict[str, list[float]] = {p: [] for p in prompts}
    for run in config.get("runs", []):
        usable = run.get("phase") == "measure" and run.get("error") is None
        usable = usable and not run.get("invalid")
        if session is not None and run.get("session", 1) != session:
            continue
        if usable and run.get("tok_per_s") and run["prompt"] in out:
            out[run["prompt"]].append(float(run["tok_per_s"]))
    return out


def sessions_of(config: Mapping[str, Any]) -> list[int]:
    """The server sessions that have measured runs, in order."""
    found = {
        int(r.get("session", 1)) for r in config.get("runs", []) if r.get("phase") == "measure"
    }
    return sorted(found)


def _by_session(config: Mapping[str, Any], prompts: Sequence[str]) -> list[dict[str, list[float]]]:
    return [prompt_runs(config, prompts, s) for s in sessions_of(config)]


def _session_means(sessions: Sequence[Sequence[float]]) -> list[float]:
    """Each session's geometric mean: the replication unit for multi-session comparisons."""
    return [math.exp(statistics.fmean(math.log(v) for v in values)) for values in sessions]


def accept_means(config: Mapping[str, Any], prompts: Sequence[str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in prompts:
        values = [
            float(r["accept_length"])
            for r in config.get("runs", [])
            if r.get("phase") == "measure" and r.get("prompt") == p and r.get("accept_length")
        ]
        out[p] = statistics.fmean(values) if values else None
    return out


def _suite_runs(runs: Mapping[str, Sequence[float]]) -> list[float]:
    n = min((len(v) for v in runs.values()), default=0)
    return suite_values({p: list(v)[:n] for p, v in runs.items()}) if n else []


def _workload_prompts(results: Mapping[str, Any]) -> list[str]:
    return list((results.get("workload") or {}).get("prompts") or [])


def _partial(config: Mapping[str, Any], prompts: Sequence[str]) -> str | None:
    """Prompts of the workload that were not measured at all (e.g. deselected with -k)."""
    seen = {r.get("prompt") for r in config.get("runs", []) if r.get("phase") == "measure"}
    missing = [p for p in prompts if p not in seen]
    if not missing:
        return None
    return (
        f"the suite score needs every prompt of the workload; not measured: "
        f"{', '.join(missing)} (deselected with -k?)"
    )


def _usable(runs: Mapping[str, Sequence[float]]) -> str | None:
    empty = [p for p, v in runs.items() if not v]
    return f"no successful measured runs for {', '.join(empty)}" if empty else None


def _accept_change(
    new: Mapping[str, float | None], old: Mapping[str, float | None]
) -> dict[str, dict[str, float | None]]:
    out = {}
    for p, value in new.items():
        before = old.get(p)
        change = value / before - 1 if value and before else None
        out[p] = {"new": value, "reference": before, "change": change}
    return out


def judge_reference(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    policy: VerdictPolicy,
) -> Judgement:
    """A/B within one run: Welch t on ln tok/s between two configs' runs."""
    prompts = _workload_prompts(results)
    new, ref = prompt_runs(config, prompts), prompt_runs(reference, prompts)
    judgement = Judgement(config["name"], JUDGED, "", f"reference {reference['name']}")
    partial = _partial(config, prompts) or _partial(reference, prompts)
    if partial:
        judgement.status, judgement.message = PARTIAL, partial
        return judgement
    problem = _usable(new) or _usable(ref)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    new_s, ref_s = _by_session(config, prompts), _by_session(reference, prompts)
    if len(new_s) >= 2 and len(ref_s) >= 2:  # sessions are the unit: Welch on session means

        def compare(a: list[list[float]], b: list[list[float]]) -> Verdict:
            return welch_log(_session_means(a), _session_means(b), policy)
    else:
        judgement.notes.append(
            "one server session per side: between-session noise is not measured, so the "
            "verdict is provisional; --specdec-sessions 3 gives a reliable A/B"
        )

        def compare(a: list[list[float]], b: list[list[float]]) -> Verdict:
            flat = [[v for s in a for v in s], [v for s in b for v in s]]
            return welch_log(flat[0], flat[1], policy, provisional=True)

    judgement.prompts = {p: compare([s[p] for s in new_s], [s[p] for s in ref_s]) for p in prompts}
    judgement.suite = compare([_suite_runs(s) for s in new_s], [_suite_runs(s) for s in ref_s])
    judgement.accept = _accept_change(
        accept_means(config, prompts), accept_means(reference, prompts)
    )
    judgement.message = judgement.suite.explanation
    return judgement


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


def judge_baseline(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    root: Path,
    policy: VerdictPolicy,
    allow_mismatch: bool = False,
) -> Judgement:
    """Against the stored history of this config's baseline key."""
    prompts = _workload_prompts(results)
    key = key_for(results, config)
    path = baseline_path(root, key)
    judgement = Judgement(config["name"], JUDGED, "", "baseline")
    judgement.notes.append(f"baseline file {path}")
    baseline = load_baseline(path)  # BaselineError propagates: a corrupt file is an error
    if baseline is None or not baseline.sessions:
        judgement.status = NO_BASELINE
        judgement.message = (
            f"no baseline for {config['name']} at {path} (hardware {key['hardware'].get('name')}, "
            f"engine {key['engine']}); run with --specdec-update-baselines"
        )
        return judgement
    judgement.against = f"baseline ({len(baseline.sessions)} sessions)"
    diff = key_mismatch(baseline.key, key)
    if diff and not allow_mismatch:
        judgement.status = MISMATCH
        judgement.message = (
            f"baseline {path} was measured under another key: {'; '.join(diff)}; "
            "refusing to compare (pass --specdec-allow-mismatch to force)"
        )
        return judgement
    if diff:
        judgement.notes.append(f"FORCED comparison across differing key fields: {'; '.join(diff)}")
    if baseline.key.get("engine_version") != key.get("engine_version"):
        judgement.notes.append(
            f"engine version {baseline.key.get('engine_version')} → {key.get('engine_version')}"
        )
    partial = _partial(config, prompts)
    if partial:
        judgement.status, judgement.message = PARTIAL, partial
        return judgement
    new = prompt_runs(config, prompts)
    problem = _usable(new)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    new_s = _by_session(config, prompts)
    judgement.prompts = {
        p: _history_verdict(
            [s[p] for s in new_s], baseline.prompt_history(p), baseline.raw_runs(p), policy
        )
        for p in prompts
        if baseline.prompt_history(p)
    }
    judgement.suite = _history_verdict(
        [_suite_runs(s) for s in new_s], baseline.suite_history(), baseline.raw_runs(None), policy
    )
    judgement.accept = _accept_change(
        accept_means(config, prompts), _history_accept(baseline, prompts)
    )
    judgement.message = judgement.suite.explanation
    return judgement


def adjust(judgements: Sequence[Judgement], policy: VerdictPolicy) -> list[Judgement]:
    """Holm across the configs' suite verdicts (the gate); per-prompt verdicts stay raw."""
    judged = [j for j in judgements if j.suite is not None]
    adjusted = adjust_verdicts([j.suite for j in judged if j.suite], policy) if judged else []
    by_config = {j.config: v for j, v in zip(judged, adjusted, strict=True)}
    out = []
    for j in judgements:
        if j.config in by_config:
            suite = by_config[j.config]
            j = replace(j, suite=suite, message=suite.explanation)
        out.append(j)
    return out


def failures(
    judgements: Sequence[Judgement], fail_on: Sequence[str], provisional_gates: bool = True
) -> list[str]:
    """Messages for every judgement whose outcome the run is asked to fail on.

    With ``provisional_gates`` False, a provisional verdict (a baseline of fewer sessions than
    the prediction-interval test needs, or a one-session A/B) is reported, not failed on."""
    out = []
    for j in judgements:
        if j.status == MISMATCH:
            out.append(f"{j.config}: {j.message}")
            continue
        verdict = _failing_verdict(j, fail_on)
        if verdict is not None and (provisional_gates or not verdict.provisional):
            out.append(f"{j.config}: {verdict.explanation}")
    return out


def not_gating(judgements: Sequence[Judgement], fail_on: Sequence[str]) -> list[str]:
    """The provisional verdicts that would fail the run if provisional verdicts gated."""
    out = []
    for j in judgements:
        verdict = _failing_verdict(j, fail_on)
        if verdict is not None and verdict.provisional and j.status != MISMATCH:
            out.append(
                f"{j.config}: {verdict.explanation} — reported, not gating "
                "(--specdec-provisional report)"
            )
    return out


def _failing_verdict(j: Judgement, fail_on: Sequence[str]) -> Verdict | None:
    """The suite verdict when its outcome is one the run is asked to fail on."""
    wanted = {f.upper() for f in fail_on}
    return j.suite if j.suite is not None and j.suite.outcome.value in wanted else None


def session_cells(
    config: Mapping[str, Any], prompts: Sequence[str], session: int
) -> dict[str, dict[str, Any]]:
    runs = prompt_runs(config, prompts, session)
    accepts = accept_means(
        {"runs": [r for r in config.get("runs", []) if r.get("session", 1) == session]}, prompts
    )
    cells = {}
    for p, values in runs.items():
        summary = SessionSummary.from_values(values)
        cells[p] = {
            "n": summary.n,
            "mean_log": summary.mean_log,
            "sd_log": summary.sd_log,
            "runs": values,
            "accept_length": accepts[p],
        }
    return cells


def update_baseline(
    results: Mapping[str, Any], config: Mapping[str, Any], root: Path, allow_mismatch: bool = False
) -> str:
    """Append each of this config's server sessions to its baseline; say what changed."""
    prompts = _workload_prompts(results)
    failed = [r for r in config.get("runs", []) if r.get("phase") == "measure" and r.get("error")]
    if config.get("error") or failed:
        raise BaselineError(
            f"{config['name']}: not added to the baseline: {len(failed)} failed run(s)"
            f"{' and a boot error' if config.get('error') else ''}; "
            "a baseline takes clean sessions only"
        )
    partial = _partial(config, prompts)
    if partial:
        raise BaselineError(f"{config['name']}: not added to the baseline: {partial}")
    sessions = sessions_of(config)
    for session in sessions:
        problem = _usable(prompt_runs(config, prompts, session))
        if problem:
            raise BaselineError(f"{config['name']}: not added to the baseline: {problem}")
    key = key_for(results, config)
    path = baseline_path(root, key)
    before = load_baseline(path)
    after = before
    means = []
    for session in sessions:
        suite_runs = _suite_runs(prompt_runs(config, prompts, session))
        suite = SessionSummary.from_values(suite_runs)
        means.append(suite.mean_log)
        cells = session_cells(config, prompts, session)
        entry = session_entry(results, config, suite, suite_runs, cells, session)
        after = append_session(path, key, entry, allow_mismatch=allow_mismatch)
    old_n = len(before.sessions) if before else 0
    new_n = len(after.sessions) if after else 0
    mean = statistics.fmean(means)
    line = f"{config['name']}: {path}: {old_n} → {new_n} sessions; suite {math.exp(mean):.1f} tok/s"
    if before and before.suite_history():
        prev = statistics.fmean(h.mean_log for h in before.suite_history())
        line += f" (history {math.exp(prev):.1f} tok/s, {math.exp(mean - prev) - 1:+.1%})"
    return line


__all__ = [
    "Judgement",
    "Outcome",
    "adjust",
    "failures",
    "judge_baseline",
    "judge_reference",
    "update_baseline",
]


def indistinguishable(results: Mapping[str, Any], tolerance: float = 0.01) -> list[str]:
    """Pairs of speculative configs whose accept length agrees within ``tolerance`` on every
    prompt: e.g. two DDTree budgets that build the same chain. Such "different" configs are
    worth a second look before their throughput difference is believed."""
    prompts = _workload_prompts(results)
    means = {
        c["name"]: accept_means(c, prompts)
        for c in results.get("configs", [])
        if any(v is not None for v in accept_means(c, prompts).values())
    }
    out = []
    names = sorted(means)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pairs = [(means[a][p], means[b][p]) for p in prompts]
            known = [(x, y) for x, y in pairs if x is not None and y is not None]
            if len(known) == len(prompts) and all(
                abs(x - y) <= tolerance * max(x, y) for x, y in known
            ):
                out.append(
                    f"{a} and {b} are indistinguishable by acceptance (accept length within "
                    f"{tolerance:.0%} on all {len(prompts)} prompts): check that they really "
                    "differ (effective verify width / tree shape)"
                )
    return out
