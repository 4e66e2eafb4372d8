"""The end of a pytest run: verdicts across configs, drift, baseline updates, reports
(Markdown, step summary, pytest-benchmark JSON, chart) and the terminal summary lines."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.joins import merge_worker_results
from pytest_specdec.core.results import ConfigRecord, atomic_write_json, write_results_file
from pytest_specdec.core.workers import lost_worker_lines, mark_lost_workers, mark_split_configs
from pytest_specdec.measure.roofline import annotate
from pytest_specdec.report.summary import cost_line
from pytest_specdec.report.table import terminal_summary, verdict_lines
from pytest_specdec.state import STASH_KEY, SpecdecState
from pytest_specdec.verdict.baselines import BaselineError
from pytest_specdec.verdict.gate import failures, indistinguishable, not_gating
from pytest_specdec.verdict.history import HistoryUnavailable


def is_xdist_controller(config: pytest.Config) -> bool:
    return config.pluginmanager.getplugin("dsession") is not None


def finish_run(session: pytest.Session) -> None:
    """At session end: merge the xdist workers' results (controller), or judge every
    config with Holm across them, list drift, update baselines if asked, write the reports
    and set the exit status when a verdict fails the run."""
    state = session.config.stash.get(STASH_KEY, None)
    if state is not None and is_xdist_controller(session.config):
        finish_controller(session, state)
        return
    if state is None or not state.used:
        return
    runner = state.runner
    try:  # judged against the history as it was, before this session is added to it
        judgements = runner.judge_all()
    except BaselineError as exc:
        state.summary_lines.append(f"verdicts: ERROR {exc}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    runner.verdicts = judgements
    session.config.hook.pytest_specdec_judgements(config=session.config, judgements=judgements)
    try:
        runner.drifts()
    except HistoryUnavailable as exc:
        state.summary_lines.append(f"drift: not checked: {exc}")
    state.final = doc = runner.document()  # the run's last document: every step below reads it
    runner.write_results(doc)
    state.summary_lines += verdict_lines(judgements)
    state.summary_lines += [f"{d['config']}: {d['message']}" for d in runner.drift]
    state.summary_lines += [f"diagnosis: {line}" for line in indistinguishable(doc)]
    if runner.settings.update_baselines:
        state.summary_lines += ["baseline update:", *runner.update_baselines(doc)]
    if state.worker_id is None:  # reports come from the process that sees every config
        state.summary_lines += write_reports(session.config, doc)
    found = failures(judgements, runner.settings.fail_on, runner.settings.provisional_gates)
    if "drift" in runner.settings.fail_on:  # opt-in: --specdec-fail-on regressed,drift
        found += [f"{d['config']}: {d['message']}" for d in runner.drift]
    if not runner.settings.provisional_gates:
        state.summary_lines += not_gating(judgements, runner.settings.fail_on)
    if found and session.exitstatus == pytest.ExitCode.OK:
        state.summary_lines += ["FAILED after Holm across configs:", *found]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def finish_controller(session: pytest.Session, state: SpecdecState) -> None:
    """The xdist controller's end: the workers' files merged into one, marked where a worker
    was lost (its configs' errors name it; what it wrote is kept) or where a config ran on
    more than one worker (which fails the run), written once."""
    config = session.config
    state.summary_lines += lost_worker_lines(state.workers)
    state.merged = merge_worker_results(state.results_path, state.started)
    if state.merged is None:  # no worker wrote a file
        return
    if state.workers.lost:
        starts = {
            c.name: ConfigRecord(c.name, c.engine, c.to_dict()).to_dict() for c in state.configs
        }
        mark_lost_workers(state.merged, state.workers, starts)
    split = mark_split_configs(state.merged, state.workers)
    if split:
        state.summary_lines.append(
            f"FAILED: {', '.join(split)} ran on more than one xdist worker (see above)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    state.merged = annotate(state.merged)  # runs of a config may come from several workers
    config.hook.pytest_specdec_results(config=config, document=state.merged)
    write_results_file(state.results_path, state.merged)
    state.summary_lines += write_reports(config, state.merged)


def write_reports(config: pytest.Config, doc: dict[str, Any]) -> list[str]:
    """Markdown (file and GitHub step summary), pytest-benchmark JSON, chart: as asked."""
    from pytest_specdec.report import export

    lines = []
    markdown: Path | None = config.getoption("--specdec-markdown")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(export.markdown_summary(doc) + "\n", encoding="utf-8")
        lines.append(f"markdown report: {markdown}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        lines.append(f"step summary: {export.write_step_summary(doc)}")
    bench: Path | None = config.getoption("--specdec-benchmark-json")
    if bench is not None:
        atomic_write_json(bench, export.benchmark_json(doc))
        lines.append(f"pytest-benchmark JSON: {bench}")
    chart: Path | None = config.getoption("--specdec-chart")
    if chart is not None:
        from pytest_specdec.report.charts import results_chart

        lines.append(f"chart: {results_chart(doc, chart)}")
    for extra in config.hook.pytest_specdec_report(config=config, document=doc):
        lines += extra
    return lines


def summary_lines(config: pytest.Config) -> list[str]:
    """The terminal summary: the tok/s table, notes, verdicts, lossless lines."""
    state = config.stash.get(STASH_KEY, None)
    if state is None:
        return []
    if state.merged is not None:  # xdist controller: the workers' merged results
        doc = state.merged
        records = {c["name"]: ConfigRecord.from_dict(c) for c in doc["configs"]}
        prompts = list(doc["workload"]["prompts"])
        lines = terminal_summary(records, prompts, str(state.results_path), rooflines(doc))
        lines += reference_costs(ConfigRecord.from_dict(r) for r in doc.get("references", []))
        verdicts = [f"{v['config']}: {v['message']}" for v in doc["verdicts"]]
        return lines + verdicts + state.summary_lines
    if not state.used:  # e.g. a controller none of whose workers wrote results
        return list(state.summary_lines)
    runner = state.runner
    prompts = [p.id for p in runner.workload.prompts]
    path = str(runner.settings.results_path) if runner.settings.results_path else None
    doc = state.final if state.final is not None else runner.document()
    lines = terminal_summary(runner.records, prompts, path, rooflines(doc))
    lines += reference_costs(runner.reference_records)
    lines += [f"note: {n}" for n in runner.notes] + state.summary_lines
    if runner.lossless_lines:
        lines += ["lossless (greedy output vs the target without speculation):"]
        lines += runner.lossless_lines
    return lines


def reference_costs(records: Iterable[ConfigRecord]) -> list[str]:
    """What booting each lossless reference (the target without speculation) cost."""
    return [line for r in records if (line := cost_line(r)) is not None]


def rooflines(doc: dict[str, Any]) -> dict[str, Any]:
    """The roofline entry of each config, as the results document carries it (annotated)."""
    return {c["name"]: c.get("roofline") for c in doc["configs"]}
