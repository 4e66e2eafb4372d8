"""The run's gate over its judgements: Holm's adjustment across configs (one family for
output tok/s, one for accept length), which outcomes fail the run (``--specdec-fail-on``:
``regressed`` covers both verdicts, ``tok-regressed`` / ``accept-regressed`` one), which
provisional verdicts are only reported, and configs whose acceptance says they may not
really differ."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_specdec.verdict.acceptance import adjust_accept
from pytest_specdec.verdict.judge import MISMATCH, Judgement
from pytest_specdec.verdict.load import adjust_load
from pytest_specdec.verdict.sessions import accept_means, workload_prompts
from pytest_specdec.verdict.stats import Verdict, VerdictPolicy, adjust_verdicts


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
    adjust_accept([j.acceptance for j in out if j.acceptance is not None], policy)
    adjust_load([j.load for j in out if j.load is not None], policy)
    return out


def failures(
    judgements: Sequence[Judgement], fail_on: Sequence[str], provisional_gates: bool = True
) -> list[str]:
    """Messages for every verdict (tok/s or accept length) whose outcome the run is asked to
    fail on.

    With ``provisional_gates`` False, a provisional verdict (a baseline of fewer sessions than
    the prediction-interval test needs, or a one-session A/B) is reported, not failed on."""
    out = []
    for j in judgements:
        if j.status == MISMATCH:
            out.append(f"{j.config}: {j.message}")
            continue
        out += [msg for v, msg in failing(j, fail_on) if provisional_gates or not v.provisional]
    return out + crossover_failures(judgements, fail_on, provisional_gates)


def not_gating(judgements: Sequence[Judgement], fail_on: Sequence[str]) -> list[str]:
    """The provisional verdicts (and lost crossovers) that would fail the run if provisional
    verdicts gated."""
    gated = set(crossover_failures(judgements, fail_on, False))
    lost = [c for c in crossover_failures(judgements, fail_on, True) if c not in gated]
    found = [msg for j in judgements if j.status != MISMATCH
             for v, msg in failing(j, fail_on) if v.provisional]  # fmt: skip
    return [f"{msg} — reported, not gating (--specdec-provisional report)"
            for msg in [*found, *lost]]  # fmt: skip


def wanted(fail_on: Sequence[str], signal: str) -> set[str]:
    """The outcomes (upper case) that fail the run for one signal: ``tok``, ``accept`` or
    ``load``."""
    out = set()
    for item in (f.lower() for f in fail_on):
        head, _, outcome = item.rpartition("-")
        if head in ("", signal):
            out.add(outcome.upper())
    return out


def failing(j: Judgement, fail_on: Sequence[str]) -> list[tuple[Verdict, str]]:
    """The verdicts of ``j`` the run is asked to fail on, each with its message."""
    out = []
    if j.suite is not None and j.suite.outcome.value in wanted(fail_on, "tok"):
        out.append((j.suite, f"{j.config}: {j.message}"))
    a = j.acceptance
    if a is not None and a.suite is not None and a.suite.outcome.value in wanted(fail_on, "accept"):
        out.append((a.suite, f"{j.config}: {a.message}"))
    for lv in j.load.levels.values() if j.load is not None else ():
        if lv.verdict is not None and lv.verdict.outcome.value in wanted(fail_on, "load"):
            out.append((lv.verdict, f"{j.config} at {lv.message}"))
        if lv.work is not None and lv.work.outcome.value in wanted(fail_on, "load"):
            out.append((lv.work, f"{j.config} at {lv.clients} clients: the GPU's own work per "
                                 f"round: {lv.work.explanation}"))  # fmt: skip
    return out


def gating(j: Judgement, fail_on: Sequence[str], provisional_gates: bool, *, load: bool
           ) -> list[str]:  # fmt: skip
    """The messages of ``j``'s failing verdicts that one gate test fails on: its load levels'
    (``load``) or its one-request ones (tok/s, accept length); a provisional verdict only with
    ``provisional_gates``."""
    levels = j.load.verdicts() if j.load is not None else []
    return [m for v, m in failing(j, fail_on)
            if (v in levels) == load and (provisional_gates or not v.provisional)]  # fmt: skip


def crossover_failures(
    judgements: Sequence[Judgement], fail_on: Sequence[str], provisional_gates: bool = True
) -> list[str]:
    """With ``crossover`` in ``fail_on``: the load levels where speculation no longer pays
    (tonight's speedup CI below 1) where it paid in the stored baselines (CI above 1), or over
    a speculative reference where the config is no longer the faster; a
    level whose curve point is provisional only with ``provisional_gates``."""
    if "crossover" not in [f.lower() for f in fail_on]:
        return []
    keep = None if provisional_gates else False
    return [f"{j.config}: {line}" for j in judgements if j.load
            for line in j.load.paying_lost(keep)]  # fmt: skip


def indistinguishable(results: Mapping[str, Any], tolerance: float = 0.01) -> list[str]:
    """Pairs of speculative configs whose accept length agrees within ``tolerance`` on every
    prompt: e.g. two DDTree budgets that build the same chain. Such "different" configs are
    worth a second look before their throughput difference is believed."""
    prompts = workload_prompts(results)
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
