"""A results document's config as the verdict maths sees it: measured tok/s per prompt and
per server session (end-to-end or decode, ``SCORES``), accept lengths, the suite score of
each run, and the baseline entries those sessions become (``update_baseline`` writes them
through the baseline store)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import position_rates_of
from pytest_specdec.core.values import SCORES
from pytest_specdec.measure.levels import (
    PROTOCOL,
    client_cpu_s,
    levels_of,
    phase_means,
    rounds_of,
)
from pytest_specdec.verdict.baselines import (
    BaselineError,
    append_session,
    baseline_path,
    key_for,
    load_baseline,
    session_entry,
)
from pytest_specdec.verdict.stats import SessionSummary
from pytest_specdec.verdict.suite import suite_values

LOAD_ONLY_MESSAGE = (
    "load levels only: no prompt was measured one request at a time (suites/test_throughput.py "
    "was not run), so there is no suite score to judge"
)


def config_measured(config: Mapping[str, Any]) -> bool:
    """Whether any prompt of ``config`` was measured one request at a time."""
    return any(r.get("phase") == "measure" for r in config.get("runs", []))


def score_of(results: Mapping[str, Any]) -> str:
    """What the verdicts of a results document judge (core/values.py ``SCORES``): its option
    ``score``, end-to-end tok/s where it has none (documents written before the choice
    existed)."""
    score = (results.get("options") or {}).get("score") or "e2e"
    if score not in SCORES:
        raise ValueError(f"score {score!r}: choose one of {', '.join(SCORES)}")
    return str(score)


def with_score(results: Mapping[str, Any], score: str | None) -> dict[str, Any]:
    """``results`` judged on ``score`` (None: its own), a shallow copy; every run records
    its TTFT and TPOT, so either score can be read from any results file."""
    out = dict(results)
    if score is not None:
        out["options"] = {**(results.get("options") or {}), "score": score}
    score_of(out)
    return out


def prompt_runs(
    config: Mapping[str, Any],
    prompts: Sequence[str],
    session: int | None = None,
    score: str = "e2e",
) -> dict[str, list[float]]:
    """Measured, successful values per prompt (failed runs are errors, never numbers): each
    run's output tok/s, or with ``score="decode"`` its decode tok/s, 1 / TPOT (a run of one
    output token has no TPOT and is left out)."""
    if score == "decode":
        return _per_prompt(config, prompts, session, "tpot_s", lambda tpot: 1.0 / tpot)
    return _per_prompt(config, prompts, session, "tok_per_s")


def sessions_of(config: Mapping[str, Any]) -> list[int]:
    """The server sessions that have measured runs, in order."""
    found = {
        int(r.get("session", 1)) for r in config.get("runs", []) if r.get("phase") == "measure"
    }
    return sorted(found)


def last_session(config: Mapping[str, Any]) -> int | None:
    """The last server session that measured anything (prompts or load rounds), or None."""
    loads = [int(e.get("session", 1)) for e in (config.get("extra") or {}).get("load") or []]
    found = sessions_of(config) + loads
    return max(found) if found else None


def alongside(
    plain: Mapping[str, Any], config: Mapping[str, Any]
) -> tuple[Mapping[str, Any], str | None]:
    """``plain``'s record cut to the server sessions booted beside ``config``'s, and the note
    that says so (None: nothing cut). Sessions are interleaved A B A B, session k of every
    config in round k, so a config stopped early (its verdicts decided under
    ``--specdec-adaptive``, or its ``--specdec-max-minutes`` reached) while the plain side ran
    on is judged against the plain sessions of its own rounds: the A/B its stopping look
    judged, not one with boots that never sat beside its own."""
    last, theirs = last_session(config), last_session(plain)
    if last is None or theirs is None or theirs <= last:
        return plain, None
    extra = dict(plain.get("extra") or {})
    extra["load"] = [e for e in extra.get("load") or [] if int(e.get("session", 1)) <= last]
    runs = [r for r in plain.get("runs", []) if int(r.get("session", 1)) <= last]
    note = (f"judged against {plain.get('name')}'s sessions 1-{last}, booted beside its own; "
            f"{plain.get('name')} ran on to session {theirs} for other configs")  # fmt: skip
    return {**plain, "runs": runs, "extra": extra}, note


def by_session(
    config: Mapping[str, Any], prompts: Sequence[str], score: str = "e2e"
) -> list[dict[str, list[float]]]:
    return [prompt_runs(config, prompts, s, score) for s in sessions_of(config)]


def session_means(sessions: Sequence[Sequence[float]]) -> list[float]:
    """Each session's geometric mean: the replication unit for multi-session comparisons."""
    return [math.exp(statistics.fmean(math.log(v) for v in values)) for values in sessions]


def suite_session_logs(
    config: Mapping[str, Any], prompts: Sequence[str], score: str = "e2e"
) -> list[float]:
    """ln of each server session's suite score (geometric mean over its runs and prompts)."""
    scores = [runs for s in by_session(config, prompts, score) if (runs := suite_runs(s))]
    return [math.log(m) for m in session_means(scores)]


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


def suite_runs(runs: Mapping[str, Sequence[float]]) -> list[float]:
    n = min((len(v) for v in runs.values()), default=0)
    return suite_values({p: list(v)[:n] for p, v in runs.items()}) if n else []


def workload_prompts(results: Mapping[str, Any]) -> list[str]:
    return list((results.get("workload") or {}).get("prompts") or [])


def unmeasured_prompts(config: Mapping[str, Any], prompts: Sequence[str]) -> str | None:
    """Prompts of the workload that were not measured at all (e.g. deselected with -k)."""
    seen = {r.get("prompt") for r in config.get("runs", []) if r.get("phase") == "measure"}
    missing = [p for p in prompts if p not in seen]
    if not missing:
        return None
    return (
        f"the suite score needs every prompt of the workload; not measured: "
        f"{', '.join(missing)} (deselected with -k?)"
    )


def empty_prompts(runs: Mapping[str, Sequence[float]], score: str = "e2e") -> str | None:
    empty = [p for p, v in runs.items() if not v]
    if not empty:
        return None
    if score == "decode":
        return (
            f"no successful measured run with a TPOT (two output tokens or more) for "
            f"{', '.join(empty)}: the decode score cannot judge them; set ignore_eos, or judge "
            "the end-to-end score (--specdec-score e2e)"
        )
    return f"no successful measured runs for {', '.join(empty)}"


def session_cells(
    config: Mapping[str, Any], prompts: Sequence[str], session: int, score: str = "e2e"
) -> dict[str, dict[str, Any]]:
    runs = prompt_runs(config, prompts, session, score)
    own = {"runs": [r for r in config.get("runs", []) if r.get("session", 1) == session]}
    accepts = accept_means(own, prompts)
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
        per_request = accept_runs(config, [p], session)[p]
        if per_request:  # what the acceptance verdict learns its noise from
            cells[p]["accept_runs"] = per_request
        positions = position_rates(config, [p], session)
        if positions:
            cells[p]["accept_positions"] = positions
    return cells


def _usable(
    config: Mapping[str, Any], prompts: Sequence[str], session: int | None = None
) -> list[Mapping[str, Any]]:
    """Measured runs of ``prompts`` (of one server session) that succeeded and were not
    ruled out by GPU hygiene."""
    return [
        r for r in config.get("runs", [])
        if r.get("phase") == "measure" and r.get("prompt") in prompts
        and r.get("error") is None and not r.get("invalid")
        and (session is None or r.get("session", 1) == session)
    ]  # fmt: skip


def accept_runs(
    config: Mapping[str, Any], prompts: Sequence[str], session: int | None = None
) -> dict[str, list[float]]:
    """Per-request accept lengths per prompt (measured, successful, valid runs only)."""
    return _per_prompt(config, prompts, session, "accept_length")


def _per_prompt(
    config: Mapping[str, Any],
    prompts: Sequence[str],
    session: int | None,
    field: str,
    value: Callable[[float], float] = float,
) -> dict[str, list[float]]:
    """``value`` of ``field`` of the usable runs, per prompt (runs that do not report it left
    out)."""
    out: dict[str, list[float]] = {p: [] for p in prompts}
    for run in _usable(config, prompts, session):
        if run.get(field):
            out[run["prompt"]].append(value(float(run[field])))
    return out


def position_rates(
    config: Mapping[str, Any], prompts: Sequence[str], session: int | None = None
) -> list[float]:
    """Mean acceptance rate per draft position over the usable runs that report it."""
    rows = [rates for r in _usable(config, prompts, session) if (rates := position_rates_of(r))]
    return column_means(rows)


def column_means(rows: Sequence[Sequence[float]]) -> list[float]:
    """Per column, the mean over the rows (as wide as the shortest row)."""
    width = min((len(r) for r in rows), default=0)
    return [statistics.fmean(float(r[k]) for r in rows) for k in range(width)]


def level_sessions(config: Mapping[str, Any], clients: int) -> list[list[float]]:
    """Per server session, the usable rounds' aggregate output tok/s at ``clients`` (rounds
    with a failed request or ruled out by GPU hygiene left out)."""
    by_session: dict[int, list[float]] = {}
    for r in rounds_of(config, clients):
        if r.ok and r.output_tok_per_s:
            by_session.setdefault(r.session, []).append(float(r.output_tok_per_s))
    return [by_session[s] for s in sorted(by_session)]


def level_accept(
    config: Mapping[str, Any], clients: int, session: int | None = None
) -> float | None:
    """Mean accept length over the usable rounds at ``clients`` (None: none reported)."""
    values = [r.accept_length for r in rounds_of(config, clients, session)
              if r.ok and r.accept_length is not None]  # fmt: skip
    return statistics.fmean(values) if values else None


def round_errors(config: Mapping[str, Any]) -> list[str]:
    """One line per failed round: what the level's test reports (never averaged away)."""
    return [
        f"{config.get('name')} at {r.clients} clients, session {r.session} round {r.round}: "
        f"{r.failed} of {r.requests} requests failed: {'; '.join(r.errors[:3])}"
        for r in rounds_of(config)
        if r.errors
    ]


def level_cells(config: Mapping[str, Any], session: int) -> dict[str, dict[str, Any]]:
    """The baseline cells of one server session's load levels, keyed by client count."""
    cells: dict[str, dict[str, Any]] = {}
    for clients in levels_of(config):
        rounds = rounds_of(config, clients, session)
        values = [float(r.output_tok_per_s) for r in rounds
                  if r.ok and r.output_tok_per_s]  # fmt: skip
        if not values:
            continue
        summary = SessionSummary.from_values(values)
        cells[str(clients)] = {
            "n": summary.n, "mean_log": summary.mean_log, "sd_log": summary.sd_log,
            "runs": values, "accept_length": level_accept(config, clients, session),
            "protocol": PROTOCOL,
        }  # fmt: skip
        phases = phase_means(rounds)
        if phases:  # the GPU seconds per round by phase, where the engine timed them
            cells[str(clients)]["phase_s"] = phases
        client = client_cpu_s(rounds)
        if client:  # the load client's CPU seconds per round: the host's pace
            cells[str(clients)]["client_cpu_s"] = client
    return cells


def session_entries(results: Mapping[str, Any], config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The baseline entries of this config's server sessions (what the baseline stores): the
    prompts and suite score where prompts were measured one request at a time, the load
    levels where those were measured.

    BaselineError when the config cannot give clean sessions (a failed run or round, a boot
    error, a prompt not measured, a prompt without a successful run, nothing measured)."""
    prompts = workload_prompts(results)
    score = score_of(results)
    failed = [r for r in config.get("runs", []) if r.get("phase") == "measure" and r.get("error")]
    failed_rounds = round_errors(config)
    if config.get("error") or failed or failed_rounds:
        raise BaselineError(
            f"{config['name']}: not added to the baseline: {len(failed)} failed run(s)"
            f"{f' and {len(failed_rounds)} failed load round(s)' if failed_rounds else ''}"
            f"{' and a boot error' if config.get('error') else ''}; "
            "a baseline takes clean sessions only"
        )
    measured, levels = config_measured(config), levels_of(config)
    if not measured and not levels:
        raise BaselineError(f"{config['name']}: not added to the baseline: nothing was measured")
    partial = unmeasured_prompts(config, prompts) if measured else None
    if partial:
        raise BaselineError(f"{config['name']}: not added to the baseline: {partial}")
    entries = []
    load_sessions = {int(e.get("session", 1)) for e in (config.get("extra") or {}).get("load", [])}
    for session in sorted(set(sessions_of(config)) | load_sessions):
        suite, scores, cells = None, [], {}
        if measured:
            runs = prompt_runs(config, prompts, session, score)
            problem = empty_prompts(runs, score)
            if problem:
                raise BaselineError(f"{config['name']}: not added to the baseline: {problem}")
            scores = suite_runs(runs)
            suite = SessionSummary.from_values(scores)
            cells = session_cells(config, prompts, session, score)
        entries.append(
            session_entry(
                results, config, suite, scores, cells, session, level_cells(config, session)
            )
        )
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
    line = f"{config['name']}: {path}: {old_n} → {new_n} sessions"
    suites = [e["suite"]["mean_log"] for e in entries if e.get("suite")]
    if suites:
        mean = statistics.fmean(suites)
        line += f"; suite {math.exp(mean):.1f} tok/s"
        if before and before.suite_history():
            prev = statistics.fmean(h.mean_log for h in before.suite_history())
            line += f" (history {math.exp(prev):.1f} tok/s, {math.exp(mean - prev) - 1:+.1%})"
    levels = levels_of(config)
    if levels:
        line += f"; load levels {', '.join(str(c) for c in levels)} clients"
    return line
