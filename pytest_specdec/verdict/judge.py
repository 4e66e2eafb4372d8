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

from pytest_specdec.verdict.baselines import (
    Baseline,
    BaselineError,
    append_session,
    baseline_path,
    key_for,
    key_mismatch,
    load_baseline,
    session_entry,
)
from pytest_specdec.verdict.stats import (
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
    cause: str | None = None  # drafter | kernel | both | target | speculation (see attribute)
    cause_text: str | None = None

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
        }

    def explain(self) -> Judgement:
        """Set the message from the suite verdict and the cause of the change (in place)."""
        if self.suite is not None:
            self.cause, self.cause_text = attribute(self.suite, self.accept)
            tail = f"; {self.cause_text}" if self.cause_text else ""
            self.message = self.suite.explanation + tail
        return self


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
    env_change = engine_env_change(baseline.sessions[-1], config)
    if env_change:
        judgement.notes.append(env_change)
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
    return judgement.explain()


def adjust(judgements: Sequence[Judgement], policy: VerdictPolicy) -> list[Judgement]:
    """Holm across the configs' suite verdicts (the gate); per-prompt verdicts stay raw."""
    judged = [j for j in judgements if j.suite is not None]
    adjusted = adjust_verdicts([j.suite for j in judged if j.suite], policy) if judged else []
    by_config = {j.config: v for j, v in zip(judged, adjusted, strict=True)}
    out = []
    for j in judgements:
        if j.config in by_config:
            j = replace(j, suite=by_config[j.config]).explain()
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
            out.append(f"{j.config}: {j.message}")
    return out


def not_gating(judgements: Sequence[Judgement], fail_on: Sequence[str]) -> list[str]:
    """The provisional verdicts that would fail the run if provisional verdicts gated."""
    out = []
    for j in judgements:
        verdict = _failing_verdict(j, fail_on)
        if verdict is not None and verdict.provisional and j.status != MISMATCH:
            out.append(
                f"{j.config}: {j.message} — reported, not gating (--specdec-provisional report)"
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


def session_entries(results: Mapping[str, Any], config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The baseline entries of this config's server sessions (what the baseline stores).

    BaselineError when the config cannot give clean sessions (a failed run, a boot error, a
    prompt not measured, a prompt without a successful run)."""
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
    entries = []
    for session in sessions_of(config):
        runs = prompt_runs(config, prompts, session)
        problem = _usable(runs)
        if problem:
            raise BaselineError(f"{config['name']}: not added to the baseline: {problem}")
        suite_runs = _suite_runs(runs)
        suite = SessionSummary.from_values(suite_runs)
        cells = session_cells(config, prompts, session)
        entries.append(session_entry(results, config, suite, suite_runs, cells, session))
    return entries


def update_baseline(
    results: Mapping[str, Any], config: Mapping[str, Any], root: Path, allow_mismatch: bool = False
) -> str:
    """Append each of this config's server sessions to its baseline; say what changed."""
    entries = session_entries(results, config)
    key = key_for(results, config)
    path = baseline_path(root, key)
    before = load_baseline(path)
    after = before
    for entry in entries:
        after = append_session(path, key, entry, allow_mismatch=allow_mismatch)
    old_n = len(before.sessions) if before else 0
    new_n = len(after.sessions) if after else 0
    mean = statistics.fmean(e["suite"]["mean_log"] for e in entries)
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
