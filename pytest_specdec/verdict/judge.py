"""Verdicts for measured configs: against the stored baseline history, or A/B in one run.

Works on results documents (dicts), so pytest, ``specdec compare`` and ``specdec baseline``
share it. The suite score (geometric mean over prompts) is the gate; per-prompt verdicts are
diagnosis. Holm's adjustment runs across the configs of one run.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_specdec.measure.levels import levels_of
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
    neighbours,
)
from pytest_specdec.verdict.compare import (
    ONE_SESSION_NOTE,
    attribute,
    borrowed_spread,
    history_verdict,
    session_verdict,
)
from pytest_specdec.verdict.crossover import Crossover, crossover_of
from pytest_specdec.verdict.load import (
    LoadJudgement,
    curve_kind,
    judge_load_history,
    judge_load_reference,
    plain_config,
    speedup_levels,
    stored_speedups,
)
from pytest_specdec.verdict.machines import machine_history, machine_of
from pytest_specdec.verdict.sessions import (
    LOAD_ONLY_MESSAGE,
    accept_means,
    alongside,
    by_session,
    config_measured,
    empty_prompts,
    prompt_runs,
    score_of,
    suite_runs,
    unmeasured_prompts,
    workload_prompts,
)
from pytest_specdec.verdict.stats import (
    Verdict,
    VerdictPolicy,
)

NO_BASELINE = "no-baseline"
MISMATCH = "mismatch"
JUDGED = "judged"
UNJUDGEABLE = "unjudgeable"
PARTIAL = "partial"
LOAD_ONLY = "load-only"  # load levels measured, no prompt at one request at a time


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
    load: LoadJudgement | None = None  # the load levels' verdicts, where measured

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
            "load": self.load.to_dict() if self.load else None,
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


def judge_reference(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    policy: VerdictPolicy,
    load_policy: VerdictPolicy | None = None,
    root: Path | None = None,
    same_machine: str = "auto",
) -> Judgement:
    """A/B within one run: Welch t on ln tok/s between two configs' runs, and at each load
    level both measured (``load_policy``; ``root``: the baseline store, for the stored speedup
    curve beside tonight's, of the sessions ``same_machine`` keeps). A config stopped before
    the reference is judged against the reference's sessions of its own rounds
    (sessions.alongside), and says so."""
    reference, cut = alongside(reference, config)
    judgement = _prompts_reference(results, config, reference, policy)
    if cut:
        judgement.notes.append(cut)
    if levels_of(config):
        load = judge_load_reference(config, reference, load_policy or policy)
        if root is not None and load.crossover is not None:
            load.baseline_crossover = stored_crossover(
                results, config, reference, root, load_policy or policy, same_machine
            )
        judgement.load = load
    return judgement


def _prompts_reference(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    policy: VerdictPolicy,
) -> Judgement:
    prompts = workload_prompts(results)
    score = score_of(results)
    new = prompt_runs(config, prompts, score=score)
    ref = prompt_runs(reference, prompts, score=score)
    against = f"reference {reference['name']}"
    judgement = Judgement(config["name"], JUDGED, "", against, score=score)
    if not config_measured(config):
        judgement.status, judgement.message = LOAD_ONLY, LOAD_ONLY_MESSAGE
        return judgement
    partial = unmeasured_prompts(config, prompts) or unmeasured_prompts(reference, prompts)
    if partial:
        judgement.status, judgement.message = PARTIAL, partial
        return judgement
    problem = empty_prompts(new, score) or empty_prompts(ref, score)
    if problem:
        judgement.status, judgement.message = UNJUDGEABLE, problem
        return judgement
    new_s, ref_s = by_session(config, prompts, score), by_session(reference, prompts, score)
    if len(new_s) < 2 or len(ref_s) < 2:
        judgement.notes.append(ONE_SESSION_NOTE)

    def compare(a: list[list[float]], b: list[list[float]]) -> Verdict:
        return session_verdict(a, b, policy)

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
        other_suite = any(d.startswith("engine_args") for d in diff)
        judgement.message = (
            f"baseline {path} was measured under another key: {'; '.join(diff)}; "
            "refusing to compare (pass --specdec-allow-mismatch to force)"
            + ("; if another suite file with other engine settings keeps its baselines there, "
               "give this one its own ([suite] baseline_dir)" if other_suite else "")
        )  # fmt: skip
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
    load_policy: VerdictPolicy | None = None,
    same_machine: str = "auto",
) -> Judgement:
    """Against the stored history of this config's baseline key (the sessions of tonight's
    machine, by ``same_machine``: verdict/machines.py); its load levels too (with
    ``load_policy``), and its speedup curve against a plain config measured in the same run."""
    judgement = Judgement(config["name"], JUDGED, "", "baseline", score=score_of(results))
    baseline = _comparable_baseline(judgement, results, config, root, allow_mismatch)
    machines = None
    if baseline is not None:
        baseline, machines = _machine_history(judgement, results, baseline, same_machine, policy)
    lenders = _lenders(root, results, config, policy, same_machine)
    if levels_of(config):
        judgement.load = _load_against_baseline(
            results, config, baseline, root, load_policy or policy, judgement.message,
            same_machine, lenders,
        )  # fmt: skip
        if machines and not config_measured(config):  # else the config's own notes say it
            judgement.load.notes.append(machines)
    if machines and config_measured(config):
        judgement.notes.append(machines)
    if not config_measured(config) and judgement.status != MISMATCH:
        judgement.status, judgement.message = LOAD_ONLY, LOAD_ONLY_MESSAGE
        return judgement
    if baseline is None:
        return judgement
    return _prompts_baseline(judgement, results, config, baseline, policy, lenders)


def _lenders(
    root: Path, results: Mapping[str, Any], config: Mapping[str, Any], policy: VerdictPolicy,
    same_machine: str,
) -> Callable[[], list[Baseline]]:  # fmt: skip
    """The configs stored beside ``config`` that may lend a short history their spread, each
    with the sessions ``same_machine`` keeps for tonight's machine: read once, when a short
    history first asks."""

    @functools.cache
    def read() -> list[Baseline]:
        tonight = machine_of(results)
        return [_tonights(b, tonight, same_machine, policy)[0]
                for b in neighbours(root, key_for(results, config))]  # fmt: skip

    return read


def _tonights(
    baseline: Baseline, tonight: str | None, same_machine: str, policy: VerdictPolicy
) -> tuple[Baseline, str | None]:
    """``baseline`` with the sessions ``same_machine`` keeps for tonight's machine
    (verdict/machines.py), and the note that says which."""
    kept, note = machine_history(baseline.sessions, tonight, same_machine, policy.min_history)
    return replace(baseline, sessions=kept), note


def _machine_history(
    judgement: Judgement, results: Mapping[str, Any], baseline: Baseline, same_machine: str,
    policy: VerdictPolicy,
) -> tuple[Baseline | None, str | None]:  # fmt: skip
    """The stored sessions that judge tonight (verdict/machines.py), with the note that says
    which; None, and the judgement closed as NO_BASELINE, where none of tonight's machine is
    stored and ``same_machine`` asks for them alone."""
    tonight = machine_of(results)
    kept, note = _tonights(baseline, tonight, same_machine, policy)
    if not kept.sessions:
        judgement.status = NO_BASELINE
        judgement.message = (
            f"no stored session of tonight's machine ({tonight}) among the "
            f"{len(baseline.sessions)} in {baseline.path} (--specdec-same-machine "
            f"{same_machine}); store some with --specdec-update-baselines, or judge against "
            "every machine's with --specdec-same-machine auto"
        )
        return None, None
    judgement.against = f"baseline ({len(kept.sessions)} sessions)"
    return kept, note


def _load_against_baseline(
    results: Mapping[str, Any], config: Mapping[str, Any], baseline: Baseline | None,
    root: Path, policy: VerdictPolicy, why: str = "", same_machine: str = "auto",
    lenders: Callable[[], Sequence[Baseline]] = tuple,
) -> LoadJudgement:  # fmt: skip
    """The load levels against their stored history (when there is one; ``why``: what the
    baseline lookup said), and tonight's speedup curve against a plain config of the same run
    beside the stored one (of the sessions ``same_machine`` keeps); a short history borrows the
    spread of ``lenders``."""
    if baseline is None:
        load = LoadJudgement(NO_BASELINE, why or "no baseline to judge the load levels against", "")
    else:
        load = judge_load_history(config, baseline, policy, lenders)
    plain = plain_config(results, config)
    if plain is not None:
        plain, cut = alongside(plain, config)
        load.crossover = crossover_of(
            plain["name"], speedup_levels(config, plain, policy), curve_kind(plain)
        )
        if cut and load.crossover is not None:
            load.notes.append(f"speedup curve {cut}")
        if load.crossover is not None:
            load.baseline_crossover = stored_crossover(
                results, config, plain, root, policy, same_machine
            )
    return load


def stored_crossover(
    results: Mapping[str, Any], config: Mapping[str, Any], plain: Mapping[str, Any], root: Path,
    policy: VerdictPolicy, same_machine: str = "auto",
) -> Crossover | None:  # fmt: skip
    """The speedup curve of the two configs' stored baselines, each of the sessions
    ``same_machine`` keeps for tonight's machine, as a history is (None unless both are stored
    under tonight's keys, with sessions kept)."""
    stored = []
    for cfg in (config, plain):
        key = key_for(results, cfg)
        found = load_baseline(baseline_path(root, key))
        if found is None or key_mismatch(found.key, key):
            return None
        kept, _ = _tonights(found, machine_of(results), same_machine, policy)
        if not kept.sessions:
            return None
        stored.append(kept)
    curve = stored_speedups(stored[0], stored[1], levels_of(config), policy)
    return crossover_of(str(plain["name"]), curve, curve_kind(plain))


def _prompts_baseline(
    judgement: Judgement, results: Mapping[str, Any], config: Mapping[str, Any],
    baseline: Baseline, policy: VerdictPolicy, lenders: Callable[[], Sequence[Baseline]] = tuple,
) -> Judgement:  # fmt: skip
    """Each prompt and the suite score against their stored history; a short one borrows the
    spread between sessions of the configs stored beside it (``lenders``)."""
    prompts = workload_prompts(results)
    score = judgement.score
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
        p: history_verdict(
            [s[p] for s in new_s],
            history,
            baseline.raw_runs(p),
            policy,
            borrowed_spread(
                history, lenders, functools.partial(Baseline.prompt_history, prompt=p), policy
            ),
        )
        for p in prompts
        if (history := baseline.prompt_history(p))
    }
    suite = baseline.suite_history()
    judgement.suite = history_verdict(
        [suite_runs(s) for s in new_s], suite, baseline.raw_runs(None), policy,
        borrowed_spread(suite, lenders, Baseline.suite_history, policy),
    )  # fmt: skip
    judgement.accept = _accept_change(
        accept_means(config, prompts), _history_accept(baseline, prompts)
    )
    judgement.acceptance = judge_accept_history(results, config, baseline, policy)
    return judgement.explain()
