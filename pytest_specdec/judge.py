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
    against_history,
    suite_values,
    welch_log,
)

NO_BASELINE = "no-baseline"
MISMATCH = "mismatch"
JUDGED = "judged"
UNJUDGEABLE = "unjudgeable"


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


def prompt_runs(config: Mapping[str, Any], prompts: Sequence[str]) -> dict[str, list[float]]:
    """Measured, successful tok/s per prompt (failed runs are errors, never numbers)."""
    out: dict[str, list[float]] = {p: [] for p in prompts}
    for run in config.get("runs", []):
        usable = run.get("phase") == "measure" and run.get("error") is None
        if usable and run.get("tok_per_s") and run["prompt"] in out:
            out[run["prompt"]].append(float(run["tok_per_s"]))
    return out


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
    problem = _usable(new) or _usable(ref)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    judgement.prompts = {p: welch_log(new[p], ref[p], policy) for p in prompts}
    judgement.suite = welch_log(_suite_runs(new), _suite_runs(ref), policy)
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
    new: Sequence[float],
    history: Sequence[SessionSummary],
    raw: Sequence[float],
    policy: VerdictPolicy,
) -> Verdict:
    if len(history) >= policy.min_history:
        return against_history(new, history, policy)
    # Fewer sessions than a prediction interval needs: Welch against the stored raw runs.
    return welch_log(new, raw, policy, provisional=True)


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
    new = prompt_runs(config, prompts)
    problem = _usable(new)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    judgement.prompts = {
        p: _history_verdict(new[p], baseline.prompt_history(p), baseline.raw_runs(p), policy)
        for p in prompts
        if baseline.prompt_history(p)
    }
    judgement.suite = _history_verdict(
        _suite_runs(new), baseline.suite_history(), baseline.raw_runs(None), policy
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


def failures(judgements: Sequence[Judgement], fail_on: Sequence[str]) -> list[str]:
    """Messages for every judgement whose outcome the run is asked to fail on."""
    wanted = {f.upper() for f in fail_on}
    out = []
    for j in judgements:
        if j.status == MISMATCH:
            out.append(f"{j.config}: {j.message}")
        elif j.suite is not None and j.suite.outcome.value in wanted:
            out.append(f"{j.config}: {j.suite.explanation}")
    return out


def session_cells(config: Mapping[str, Any], prompts: Sequence[str]) -> dict[str, dict[str, Any]]:
    runs, accepts = prompt_runs(config, prompts), accept_means(config, prompts)
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
    """Append this config's session to its baseline; return a line saying what changed."""
    prompts = _workload_prompts(results)
    failed = [r for r in config.get("runs", []) if r.get("phase") == "measure" and r.get("error")]
    if config.get("error") or failed:
        raise BaselineError(
            f"{config['name']}: not added to the baseline: {len(failed)} failed run(s)"
            f"{' and a boot error' if config.get('error') else ''}; "
            "a baseline takes clean sessions only"
        )
    runs = prompt_runs(config, prompts)
    problem = _usable(runs)
    if problem:
        raise BaselineError(f"{config['name']}: not added to the baseline: {problem}")
    suite_runs = _suite_runs(runs)
    suite = SessionSummary.from_values(suite_runs)
    key = key_for(results, config)
    path = baseline_path(root, key)
    before = load_baseline(path)
    entry = session_entry(results, config, suite, suite_runs, session_cells(config, prompts))
    after = append_session(path, key, entry, allow_mismatch=allow_mismatch)
    old_n = len(before.sessions) if before else 0
    line = (
        f"{config['name']}: {path}: {old_n} → {len(after.sessions)} sessions; "
        f"suite {math.exp(suite.mean_log):.1f} tok/s"
    )
    if before and before.suite_history():
        prev = statistics.fmean(h.mean_log for h in before.suite_history())
        line += f" (history {math.exp(prev):.1f} tok/s, {math.exp(suite.mean_log - prev) - 1:+.1%})"
    return line


def outcome_counts(judgements: Sequence[Judgement]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for j in judgements:
        counts[j.outcome] = counts.get(j.outcome, 0) + 1
    return counts


__all__ = [
    "Judgement",
    "Outcome",
    "adjust",
    "failures",
    "judge_baseline",
    "judge_reference",
    "outcome_counts",
    "update_baseline",
]
