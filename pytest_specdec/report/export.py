"""Reports for CI from a results document: job-summary Markdown, pytest-benchmark JSON, and
JUnit properties.

Pure functions on the document that ``load_results`` returns (or ``Runner.document()``). They
present what was recorded; the only numbers derived here are the per-cell summaries of
:mod:`pytest_specdec.report.summary` (mean ± 95% CI, accept length) and, for pytest-benchmark, the
seconds per output token of each run (1 / tok/s).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.measure.roofline import by_config
from pytest_specdec.report.load import markdown_section
from pytest_specdec.report.markdown import (
    cost_lines,
    environment_details,
    excluded,
    failure_lines,
    gpu_lines,
    md,
    position_section,
    ratio_text,
    throughput_table,
    verdict_section,
)
from pytest_specdec.report.summary import summarize
from pytest_specdec.report.table import roofline_lines
from pytest_specdec.verdict.judge import LOAD_ONLY, Judgement

# The pytest-benchmark JSON layout this module writes (read by pytest-benchmark >= 3.1).
BENCHMARK_FORMAT_VERSION = "5.1.0"
NULL = "null"


def records(results: Mapping[str, Any]) -> list[ConfigRecord]:
    """The results' config records."""
    return [ConfigRecord.from_dict(c) for c in results.get("configs", [])]


def prompt_names(results: Mapping[str, Any]) -> list[str]:
    """The workload's prompts in order; else the prompts seen in the runs."""
    listed = (results.get("workload") or {}).get("prompts")
    if listed:
        return [str(p) for p in listed]
    seen: dict[str, None] = {}
    for config in results.get("configs", []):
        for run in config.get("runs", []):
            seen.setdefault(str(run.get("prompt")), None)
    return list(seen)


def hardware_label(results: Mapping[str, Any]) -> str:
    gpu = results.get("gpu")
    devices = gpu.get("devices") if isinstance(gpu, Mapping) else None
    if devices:
        return f"{len(devices)}x {devices[0].get('name') or 'unknown GPU'}"
    host = results.get("host") or {}
    return str(host.get("cpu_model") or host.get("machine") or "unknown host")


# ------------------------------------------------------------------------------- Markdown


def markdown_summary(results: Mapping[str, Any]) -> str:
    """A GitHub-flavoured Markdown report of one results document (for the job summary)."""
    recs, prompts = records(results), prompt_names(results)
    workload = (results.get("workload") or {}).get("name") or "workload"
    options = results.get("options") or {}
    count = options.get("sessions") or 1
    sessions = f" in each of {count} server sessions" if count > 1 else ""
    notes = [f"- note: {md(n)}" for n in results.get("notes") or []]
    what = f"{options.get('runs', '?')} measured run(s) per cell"
    if not any(r.measured() for r in recs):  # load levels only
        what = f"load levels of {options.get('rounds', '?')} round(s), none one at a time"
    out = [
        f"## Speculative decoding: {md(workload)} on {md(hardware_label(results))}",
        "",
        f"{len(recs)} config(s) x {len(prompts)} prompt(s), {what}{sessions}, max_tokens "
        f"{options.get('max_tokens', '?')}; "
        f"{results.get('started_at', '?')} → {results.get('finished_at', '?')}.",
        *(["", *notes] if notes else []),
        "",
        *_one_request_sections(results, recs, prompts),
        *position_section(results, prompts),
        *markdown_section(results),
        "### GPU health",
        "",
        *gpu_lines(recs),
        "",
        "### Machine time",
        "",
        *cost_lines(recs),
        "",
        "### Failures",
        "",
        *failure_lines(recs),
        "",
        *environment_details(results, recs),
    ]
    return "\n".join(out) + "\n"


def _one_request_sections(
    results: Mapping[str, Any], recs: Sequence[ConfigRecord], prompts: Sequence[str]
) -> list[str]:
    """The throughput table and the suite verdicts of the configs measured one request at a
    time (a config measured at load levels only has its own section)."""
    shown = [r for r in recs if r.measured() or not r.extra.get("load")]
    if not shown:
        return []
    rooflines = by_config(results)
    roof_lines = roofline_lines(rooflines)
    verdicts = [v for v in results.get("verdicts") or [] if v.get("status") != LOAD_ONLY]
    return [
        "### Output tok/s",
        "",
        "Mean ± 95% CI half-width over the successful measured runs; `acc` = mean accept "
        "length (tokens per verify step) where the engine reports it; geomean = geometric mean "
        "over prompts (the suite score). Failed runs and runs ruled out by GPU hygiene "
        "(invalid) are counted, never averaged in.",
        "",
        throughput_table(shown, prompts, rooflines),
        *(["", *(f"- {md(line)}" for line in roof_lines)] if roof_lines else []),
        "",
        "### Verdicts (suite score)",
        "",
        *verdict_section(verdicts),
        "",
    ]


def write_step_summary(
    results: Mapping[str, Any], path: str | os.PathLike[str] | None = None
) -> Path:
    """Append the Markdown report to ``path`` (default ``$GITHUB_STEP_SUMMARY``); never truncate."""
    target = path if path is not None else os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        raise ValueError(
            "no step summary file: GITHUB_STEP_SUMMARY is not set (it is set inside GitHub "
            "Actions jobs); pass a path explicitly"
        )
    out = Path(target)
    with out.open("a", encoding="utf-8") as fh:
        fh.write(markdown_summary(results) + "\n")
    return out


# ------------------------------------------------------------------------ pytest-benchmark


def benchmark_stats(data: Sequence[float]) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` block for a list of timings (one per round), computed by
    pytest-benchmark's own ``Stats`` so that the figures match its version exactly."""
    stats = _benchmark_stats_class()()
    for value in data:
        stats.update(value)
    return {**stats.as_dict(), "data": list(data), "iterations": 1}


def _benchmark_stats_class() -> Any:
    from pytest_benchmark.stats import Stats  # untyped; a dependency of this package

    return Stats


def _machine_info(results: Mapping[str, Any]) -> dict[str, Any]:
    host = results.get("host") or {}
    gpu = results.get("gpu")
    return {
        "node": host.get("hostname"),
        "processor": host.get("processor"),
        "machine": host.get("machine"),
        "python_version": host.get("python"),
        "system": str(host.get("platform") or "").split("-")[0] or None,
        "cpu": {"brand_raw": host.get("cpu_model"), "count": host.get("cpu_count")},
        "gpu": gpu.get("devices") if isinstance(gpu, Mapping) else None,
    }


def _commit_info(results: Mapping[str, Any]) -> dict[str, Any]:
    commit = (results.get("options") or {}).get("commit")
    return {"id": commit or "unknown", "time": None, "author_time": None, "dirty": None}


def _benchmark(rec: ConfigRecord, prompt: str, workload: str) -> dict[str, Any] | None:
    runs = rec.measured(prompt)
    data = [1.0 / float(r.tok_per_s) for r in runs if r.ok and r.tok_per_s and not r.invalid]
    if not data:
        return None
    cell, (failed, invalid) = summarize(runs), excluded(runs)
    param = f"{rec.name}-{prompt}"
    return {
        "group": prompt,
        "name": f"test_throughput[{param}]",
        "fullname": f"suites/test_throughput.py::test_throughput[{param}]",
        "params": {"spec_config": rec.name, "prompt": prompt},
        "param": param,
        "extra_info": {
            "unit": "seconds per output token (ops = output tok/s)",
            "workload": workload,
            "engine": rec.engine,
            "engine_version": rec.engine_version,
            "tok_per_s_mean": cell.mean,
            "tok_per_s_ci95_half": cell.ci_half,
            "accept_length": cell.accept_length,
            "output_tokens_mean": cell.output_tokens,
            "failed_runs": failed,
            "invalid_runs": invalid,
        },
        "options": {"timer": "perf_counter_ns", "warmup": True, "min_rounds": len(runs)},
        "stats": benchmark_stats(data),
    }


def _package_version(name: str, fallback: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return fallback


def benchmark_json(
    results: Mapping[str, Any], commit_info: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The results as a pytest-benchmark ``--benchmark-json`` document.

    One benchmark per (config, prompt); the timed quantity is seconds per output token of each
    successful measured run, so ``ops`` is output tok/s (the harmonic mean over runs). Cells
    without a successful run are left out and listed under ``specdec.skipped`` with the cause.
    """
    workload = str((results.get("workload") or {}).get("name") or "workload")
    benchmarks, skipped = [], []
    for rec in records(results):
        for prompt in prompt_names(results):
            bench = _benchmark(rec, prompt, workload)
            if bench is not None:
                benchmarks.append(bench)
                continue
            runs = rec.measured(prompt)
            errors = [r.error for r in runs if r.error]
            invalid = ["GPU hygiene: " + "; ".join(r.invalid) for r in runs if r.invalid]
            cause = rec.error or next(iter(errors + invalid), "not measured")
            skipped.append({"config": rec.name, "prompt": prompt, "reason": cause})
    return {
        "machine_info": _machine_info(results),
        "commit_info": dict(commit_info) if commit_info is not None else _commit_info(results),
        "benchmarks": benchmarks,
        "datetime": results.get("finished_at") or results.get("started_at"),
        "version": _package_version("pytest-benchmark", BENCHMARK_FORMAT_VERSION),
        "specdec": {
            "tool_version": (results.get("tool") or {}).get("version"),
            "unit": "seconds per output token",
            "skipped": skipped,
        },
    }


# ------------------------------------------------------------------------------------ JUnit


def _text(value: float | int | None, fmt: str = ".3f") -> str:
    return NULL if value is None else format(value, fmt)


def junit_properties(
    config_record: ConfigRecord | Mapping[str, Any],
    prompt: str,
    verdict: Judgement | Mapping[str, Any] | None,
) -> list[tuple[str, str]]:
    """``(name, value)`` pairs for ``record_property`` of one (config, prompt) test.

    ``verdict`` is the config's judgement (or its ``to_dict()``); None before it is judged.
    Unknown values read ``"null"``, never a stand-in zero.
    """
    rec = (
        config_record
        if isinstance(config_record, ConfigRecord)
        else ConfigRecord.from_dict(config_record)
    )
    runs = rec.measured(prompt)
    cell, (failed, invalid) = summarize(runs), excluded(runs)
    j = verdict.to_dict() if isinstance(verdict, Judgement) else verdict
    per_prompt = ((j or {}).get("prompts") or {}).get(prompt) or {}
    return [
        ("specdec_config", rec.name),
        ("specdec_prompt", prompt),
        ("specdec_tok_per_s_mean", _text(cell.mean)),
        ("specdec_tok_per_s_ci95_half", _text(cell.ci_half)),
        ("specdec_accept_length", _text(cell.accept_length)),
        ("specdec_runs", str(cell.n)),
        ("specdec_failed_runs", str(failed)),
        ("specdec_invalid_runs", str(invalid)),
        ("specdec_verdict", str(per_prompt.get("outcome") or NULL)),
        ("specdec_ratio", ratio_text(per_prompt) if per_prompt else NULL),
        ("specdec_suite_verdict", str(j.get("outcome")) if j else NULL),
    ]


def verdict_properties(judgement: Judgement) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of a config's verdict test: both verdicts and their reasons."""
    accept = judgement.acceptance
    accept_v = accept.suite if accept is not None else None
    return [
        ("specdec_verdict", judgement.outcome),
        ("specdec_explanation", judgement.message),
        ("specdec_accept_verdict", accept.outcome if accept is not None else NULL),
        ("specdec_accept_ratio", _text(accept_v.ratio, ".4f") if accept_v else NULL),
        ("specdec_accept_explanation", accept.message if accept is not None else NULL),
    ]


def load_properties(judgement: Judgement) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of a config's load-level verdict test: per level its outcome,
    ratio and MDE (and those of its GPU-work verdict where judged), and the crossover of its
    speedup curve."""
    load = judgement.load
    if load is None:
        return []
    out = [("specdec_load", load.message)]
    for clients, lv in sorted(load.levels.items()):
        v = lv.verdict
        out += [
            (f"specdec_load_c{clients}_verdict", v.outcome.value if v else NULL),
            (f"specdec_load_c{clients}_ratio", _text(v.ratio, ".4f") if v else NULL),
            (f"specdec_load_c{clients}_mde", _text(v.mde, ".4f") if v else NULL),
        ]
        if lv.work is not None:  # the GPU's own work per round, where the engine timed it
            out += [
                (f"specdec_load_c{clients}_work_verdict", lv.work.outcome.value),
                (f"specdec_load_c{clients}_work_ratio", _text(lv.work.ratio, ".4f")),
                (f"specdec_load_c{clients}_work_mde", _text(lv.work.mde, ".4f")),
            ]
    out.append(("specdec_crossover", load.crossover.text if load.crossover else NULL))
    return out
