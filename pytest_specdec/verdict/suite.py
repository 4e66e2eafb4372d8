"""Suite scores: many prompts' tok/s combined into one number per run or session, the
geometric mean over prompts, so that every prompt weighs the same."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean

from pytest_specdec.verdict.numbers import log_values
from pytest_specdec.verdict.stats import SessionSummary


def suite_values(per_prompt_runs: Mapping[str, Sequence[float]]) -> list[float]:
    """Per-run suite scores: run i's geometric mean over prompts (every prompt needs n runs)."""
    if not per_prompt_runs:
        raise ValueError("suite_values: no prompts given")
    counts = {p: len(v) for p, v in per_prompt_runs.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"suite_values: every prompt needs the same number of runs, got {counts}")
    logs = [log_values(v, f"runs[{p!r}]") for p, v in per_prompt_runs.items()]
    return [math.exp(fmean(column)) for column in zip(*logs, strict=True)]


def suite_session(per_prompt: Mapping[str, SessionSummary]) -> SessionSummary:
    """One session's suite summary from its per-prompt summaries. The mean is exact; the
    sd assumes prompts vary independently within a run. With raw runs at hand,
    ``SessionSummary.from_values(suite_values(runs))`` is exact."""
    if not per_prompt:
        raise ValueError("suite_session: no prompts given")
    sums = list(per_prompt.values())
    sd = math.sqrt(math.fsum(s.sd_log**2 for s in sums)) / len(sums)
    return SessionSummary(min(s.n for s in sums), fmean(s.mean_log for s in sums), sd)


def suite_history(per_prompt: Mapping[str, Sequence[SessionSummary]]) -> list[SessionSummary]:
    """Suite summaries of past sessions; session i of every prompt belongs together."""
    counts = {p: len(v) for p, v in per_prompt.items()}
    if not counts or len(set(counts.values())) != 1:
        raise ValueError(f"suite_history: every prompt needs the same sessions, got {counts}")
    keys = list(per_prompt)
    return [
        suite_session(dict(zip(keys, row, strict=True)))
        for row in zip(*per_prompt.values(), strict=True)
    ]


def suite_score(
    per_prompt_new: Mapping[str, Sequence[float]], per_prompt_ref: Mapping[str, Sequence[float]]
) -> float:
    """Geometric mean over prompts of the per-prompt ratios of geometric means."""
    if not per_prompt_ref or set(per_prompt_new) != set(per_prompt_ref):
        only_new = sorted(set(per_prompt_new) - set(per_prompt_ref))
        only_ref = sorted(set(per_prompt_ref) - set(per_prompt_new))
        raise ValueError(
            f"suite_score: prompts differ or none given: only in new {only_new}, "
            f"only in reference {only_ref}"
        )
    logs = [
        fmean(log_values(per_prompt_new[p], f"new[{p!r}]")) - fmean(log_values(v, f"ref[{p!r}]"))
        for p, v in per_prompt_ref.items()
    ]
    return math.exp(fmean(logs))
