"""Reports from results documents: Markdown job summary, pytest-benchmark JSON, JUnit
properties, and PNG charts. Golden numbers come from a small synthetic document built here;
a real results file (``results/latest.json`` or ``$SPECDEC_RESULTS_FILE``) is checked too
when one is present."""

from __future__ import annotations

import importlib
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests_support import missing

from pytest_specdec.cli import main as cli_main
from pytest_specdec.core.results import (
    ConfigRecord,
    ResultsError,
    RunRecord,
    atomic_write_json,
    load_results,
)
from pytest_specdec.gpu.readings import Sample
from pytest_specdec.gpu.telemetry import RunTelemetry, summarize_device
from pytest_specdec.report.charts import (
    ChartInputError,
    ChartsUnavailable,
    check_available,
    results_chart,
    trend_chart,
)
from pytest_specdec.report.export import (
    benchmark_json,
    benchmark_stats,
    junit_properties,
    markdown_summary,
    verdict_properties,
    write_step_summary,
)
from pytest_specdec.report.markdown import code, md
from pytest_specdec.report.summary import config_cells, suite_geomean
from pytest_specdec.verdict.acceptance import AcceptJudgement, accept_policy, exact_verdict
from pytest_specdec.verdict.baselines import Baseline
from pytest_specdec.verdict.judge import Judgement
from pytest_specdec.verdict.stats import Outcome, SessionSummary, Verdict, VerdictPolicy

REPO = Path(__file__).resolve().parent.parent

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REAL_RESULTS = Path(os.environ.get("SPECDEC_RESULTS_FILE", "results/latest.json"))


def telemetry(temps: list[float], clocks: list[float], bits: list[int]) -> dict[str, Any]:
    """A run's ``gpu`` dict exactly as ``RunTelemetry.to_dict()`` writes it."""
    samples = [
        Sample(t_ns=i * 100_000_000, gpu_temp_c=t, sm_clock_mhz=c, reasons=b, power_w=650.0)
        for i, (t, c, b) in enumerate(zip(temps, clocks, bits, strict=True))
    ]
    dev = summarize_device(0, samples, start_ns=0, output_tokens=64)
    median, mean = statistics.median(clocks), statistics.fmean(clocks)
    return RunTelemetry("", 1.0, 64, (dev,), None, None, median, mean).to_dict()


def run(config: str, prompt: str, i: int, tps: float | None, **kw: Any) -> RunRecord:
    if tps is None:
        return RunRecord(config=config, prompt=prompt, run=i, **kw)
    return RunRecord(config, prompt, i, output_tokens=64, wall_s=64 / tps, tok_per_s=tps, **kw)


def verdict(outcome: Outcome, ratio: float, low: float, high: float, p: float) -> Verdict:
    return Verdict(
        outcome, ratio, low, high, p, 1 - p, min(1.0, 2 * p), 0.031, 3, 15, 0.03, 0.01,
        "welch", False, None, f"suite {ratio - 1:+.1%} vs reference", 0.01, 0.9, 0.02, 10.0,
    )  # fmt: skip


def synthetic() -> dict[str, Any]:
    """Two prompts; a baseline, a drafted config with GPU telemetry, a failed run and an
    invalid (throttled) run with its rerun, a config that never booted; one REGRESSED verdict."""
    hot = telemetry([61, 70, 83], [1980, 1700, 1410], [0x4, 0x4, 0x44])
    cool = telemetry([60, 62, 64], [1980, 1975, 1980], [0x4, 0x1, 0x4])
    why = ["GPU 0: hw_thermal_slowdown in 33.3% of 3 samples (limit 1.0%)"]
    base = ConfigRecord("baseline", "llamacpp", {"name": "baseline"}, engine_version="b4000")
    base.models = {"target": {"id": "tiny.gguf", "sha256": "ab" * 32}}
    base.runs = [run("baseline", "p1", i, v) for i, v in enumerate([100.0, 102.0, 98.0])]
    base.runs += [run("baseline", "p2", i, v) for i, v in enumerate([50.0, 52.0, 48.0])]
    draft = ConfigRecord("draft-d4", "llamacpp", {"name": "draft-d4"}, engine_version="b4000")
    draft.models = {"target": {"id": "tiny.gguf"}, "draft": {"id": "tinier.gguf"}}
    draft.runs = [run("draft-d4", "p0", 0, 10.0, phase="warmup")]
    for i, v in enumerate([120.0, 124.0, 116.0]):
        draft.runs.append(run("draft-d4", "p1", i, v, accept_length=2.5, gpu=cool))
    draft.runs.append(run("draft-d4", "p2", 0, 60.0, accept_length=2.0, gpu=cool))
    draft.runs.append(run("draft-d4", "p2", 1, 30.0, accept_length=2.0, gpu=hot, invalid=why))
    draft.runs.append(run("draft-d4", "p2", 2, None, error="HTTP 500: kv|cache <full>"))
    draft.runs.append(run("draft-d4", "p2", 3, 62.0, accept_length=2.0, gpu=cool))  # the rerun
    broken = ConfigRecord("broken", "llamacpp", {}, error="llama-server exited (code 1)\nE: bad")
    judged = Judgement("draft-d4", "judged", "suite -8.8% vs reference", "reference baseline")
    judged.suite = verdict(Outcome.REGRESSED, 0.912, 0.88, 0.945, 0.0012)
    undecided = replace(verdict(Outcome.INCONCLUSIVE, 0.99, 0.95, 1.03, 0.3), runs_needed=12)
    judged.prompts = {"p1": verdict(Outcome.IMPROVED, 1.2, 1.1, 1.3, 0.001), "p2": undecided}
    judged.accept = {"p1": {"new": 2.5, "reference": 2.0, "change": 0.25}}
    judged.notes = ["engine version b3990 → b4000"]
    judged.cause = "drafter"
    judged.acceptance = AcceptJudgement(
        "judged", "", suite=exact_verdict(2.25, 2.5, accept_policy(VerdictPolicy()), (4, 3))
    ).explain()
    return {
        "schema": 1,
        "tool": {"name": "pytest-specdec", "version": "0.1.0"},
        "started_at": "2026-01-02T03:04:05+00:00",
        "finished_at": "2026-01-02T03:14:05+00:00",
        "host": {"hostname": "ci-1", "cpu_model": "Test CPU", "cpu_count": 8, "python": "3.11.7"},
        "gpu": {"devices": [{"index": 0, "name": "NVIDIA H200", "driver_version": "550.1"}]},
        "options": {"runs": 3, "max_tokens": 64, "commit": "abc123"},
        "workload": {
            "name": "seed",
            "source": "builtin:seed",
            "sha256": "cd" * 32,
            "prompts": ["p1", "p2"],
        },
        "configs": [base.to_dict(), draft.to_dict(), broken.to_dict()],
        "verdicts": [judged.to_dict()],
    }


# ------------------------------------------------------------------------------- Markdown


def test_markdown_throughput_table_is_golden() -> None:
    text = markdown_summary(synthetic())
    # 95% t half-width of (100, 102, 98) is t(0.975, 2) * 2 / sqrt(3) = 4.97, of
    # (120, 124, 116) 9.94, of (60, 62) t(0.975, 1) * sqrt(2) / sqrt(2) = 12.71 (the invalid
    # run at 30 tok/s and the failed run count, never average in);
    # geomean = geometric mean over prompts of per-prompt geometric means.
    golden = "\n".join(
        [
            "| config | p1 | p2 | geomean |",
            "| --- | ---: | ---: | ---: |",
            "| `baseline` | 100.0 ± 5.0 | 50.0 ± 5.0 | **70.7** |",
            "| `draft-d4` | 120.0 ± 9.9 · acc 2.50 "
            "| 61.0 ± 12.7 · acc 2.00 · **1 failed** · **1 invalid** | **85.5** |",
            "| `broken` | **BOOT FAILED** | - | - |",
        ]
    )
    assert golden in text
    assert text.startswith("## Speculative decoding: seed on 1x NVIDIA H200\n")
    assert "3 config(s) x 2 prompt(s), 3 measured run(s) per cell, max_tokens 64" in text


def test_markdown_verdict_table_has_outcome_ratio_p_mde_accept_and_notes() -> None:
    text = markdown_summary(synthetic())
    row = (
        "| `draft-d4` | **REGRESSED** | 0.912 [0.880, 0.945] 90% | 0.0012 / 0.0024 | "
        "3.1% (δ 3.0%) | 3 / 15 | +25.0% | REGRESSED -10.0% exact | drafter | reference "
        "baseline<br>engine version b3990 → b4000 |"
    )
    assert row in text
    assert "- `draft-d4`: suite -8.8% vs reference" in text
    assert "- `draft-d4`: accept length REGRESSED: 0.900x (2.250 vs 2.500), exact:" in text
    assert "| `draft-d4` | p1 | **IMPROVED** | 1.200 [1.100, 1.300] 90% | 0.001 |" in text
    undecided = (
        "| `draft-d4` | p2 | INCONCLUSIVE | 0.990 [0.950, 1.030] 90% | 0.3 | 3.1% (δ 3.0%) |"
    )
    assert f"{undecided} ~12 sessions per side |" in text  # how much more would decide it


def test_markdown_gpu_flags_ranges_reasons_and_invalid_runs() -> None:
    text = markdown_summary(synthetic())
    row = (
        "| `draft-d4` | 6 | 60-83 °C | 1410-1980 MHz | "
        "gpu_idle 5/6, **hw_thermal_slowdown** 1/6, sw_power_cap 6/6 | 1 | 0 |"
    )
    assert row in text, text
    assert "- `draft-d4` p2 run 1 invalid (rerun): GPU 0: hw_thermal_slowdown in 33.3%" in text
    assert "`baseline` |" not in text.split("### GPU health")[1].split("### Failures")[0]


def test_markdown_gpu_health_covers_load_rounds() -> None:
    """A run of load levels only has its GPU telemetry in its rounds: the health table counts
    the measured rounds (never the warm-up one) and names a ruled-out round."""
    doc = synthetic()
    plain = next(c for c in doc["configs"] if c["name"] == "baseline")
    hot = telemetry([61, 70, 88], [1980, 1700, 1410], [0x4, 0x4, 0x44])
    rounds = [{"clients": 4, "round": n, "session": 1, "requests": 8, "failed": 0,
               "wall_s": 1.0, "output_tokens": 512, "output_tok_per_s": 512.0, "ttft_s": {},
               "tpot_s": {}, "decode_tok_per_s": {}, "accept_length": None,
               "verify_steps": None, "accept_source": None, "warmup": n == 0,
               "gpu": hot if n == 2 else telemetry([50], [1980], [0x4]),
               "invalid": ["GPU 0: hw_thermal_slowdown in 33.3%"] if n == 2 else []}
              for n in range(3)]  # fmt: skip
    plain["extra"]["load"] = rounds
    health = markdown_summary(doc).split("### GPU health")[1].split("### Failures")[0]
    assert "| `baseline` | 2 | 50-88 °C | 1410-1980 MHz |" in health, health
    assert "**hw_thermal_slowdown** 1/2" in health
    assert ("- `baseline` 4 clients round 2 (session 1) invalid (rerun): GPU 0: "
            "hw_thermal_slowdown in 33.3%") in health  # fmt: skip


def test_markdown_says_what_each_config_held_the_machine_for() -> None:
    """The machine time of every config, summed over its server sessions with its parts (the
    job summary of a nightly load run carries the GPU-minutes of each curve)."""
    doc = synthetic()
    assert "### Machine time\n\n_Not recorded._" in markdown_summary(doc)
    plain = next(c for c in doc["configs"] if c["name"] == "baseline")
    plain["extra"]["cost"] = [
        {"total_s": 150.0, "start_s": 60.0, "load_s": 80.0, "stop_s": 10.0},
        {"total_s": 126.0, "start_s": 50.0, "load_s": 70.0, "stop_s": 6.0},
    ]
    section = markdown_summary(doc).split("### Machine time")[1].split("### Failures")[0]
    assert section.strip() == (
        "- baseline: machine time 4.60 min over 2 server sessions (boot 110.0 s, load levels "
        "150.0 s, stop 16.0 s)"
    )


def test_markdown_lists_failures_with_their_cause_escaped() -> None:
    text = markdown_summary(synthetic())
    assert "- `broken` **boot failed**: llama-server exited (code 1)" in text
    assert "  E: bad" in text
    assert "- `draft-d4/p2` measure run 2: HTTP 500: kv\\|cache &lt;full&gt;" in text


def test_markdown_environment_is_collapsible_with_versions_models_and_hardware() -> None:
    env = markdown_summary(synthetic()).split("<details><summary>Environment")[1]
    assert "| `baseline` | llamacpp | b4000 | tiny.gguf (sha256 `abababababab`) | - |" in env
    assert "tinier.gguf" in env and "Test CPU, 8 CPUs" in env
    assert "- GPU: index 0, name NVIDIA H200, driver_version 550.1" in env
    assert env.rstrip().endswith("</details>")


def test_markdown_has_acceptance_per_draft_position_where_runs_report_it() -> None:
    """Per draft position over the usable measured runs: from the engine's own rates (llama.cpp)
    or from SGLang's histogram of correct drafts per verify step, padded to the drafts it
    proposed per step; failed and invalid runs left out; no section where no run has them."""
    doc = synthetic()
    assert "Acceptance per draft position" not in markdown_summary(doc)
    draft = next(c for c in doc["configs"] if c["name"] == "draft-d4")
    hist = {"spec_correct_drafts_histogram": [1, 1, 2], "spec_verify_ct": 4,
            "spec_num_proposed_drafts": 12}  # fmt: skip
    for r in draft["runs"]:
        if r["prompt"] == "p1":
            r["extra"]["meta_info"] = hist  # 3 drafts per step: 75%, 50%, then 0%
        elif r["prompt"] == "p2":  # runs 1 (invalid) and 2 (failed) do not count
            r["extra"]["accept_rate_per_position"] = (
                [0.5, 0.25, 0.0] if r["run"] != 1 else [1, 1, 1]
            )
    text = markdown_summary(doc)
    section = text.split("### Acceptance per draft position")[1].split("### GPU health")[0]
    assert "| `draft-d4` | 65% | 40% | 0% |" in section  # (3 x 75% + 2 x 50%) / 5, ...
    assert "| `draft-d4` | p1 | 75% | 50% | 0% |" in section
    assert "| `draft-d4` | p2 | 50% | 25% | 0% |" in section
    assert "baseline" not in section


def test_markdown_says_why_sections_are_empty() -> None:
    doc = synthetic()
    doc["verdicts"], doc["gpu"] = [], None
    doc["notes"] = ["no GPU telemetry: NVML init failed: NVML Shared Library Not Found"]
    doc["configs"] = doc["configs"][:1]
    text = markdown_summary(doc)
    assert "_No verdicts recorded" in text
    assert "_No GPU telemetry recorded" in text
    assert "- note: no GPU telemetry: NVML init failed: NVML Shared Library Not Found" in text
    assert "None: all 6 runs (warmup and measured) succeeded; every server booted." in text
    assert "on Test CPU" in text.splitlines()[0]


def test_step_summary_appends_and_needs_a_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    write_step_summary(synthetic())
    write_step_summary(synthetic(), target)
    text = target.read_text()
    assert text.startswith("earlier step\n") and text.count("## Speculative decoding") == 2
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    with pytest.raises(ValueError, match="GITHUB_STEP_SUMMARY is not set"):
        write_step_summary(synthetic())


# ------------------------------------------------------------------------ pytest-benchmark


@pytest.mark.parametrize("data", [[0.5], [3.0, 1.0], [4, 1, 2, 8], [9, 1, 1, 1, 2, 2, 40]])
def test_benchmark_stats_block_has_every_field_pytest_benchmark_reads(data: list[float]) -> None:
    fields = importlib.import_module("pytest_benchmark.stats").Stats.fields
    ours = benchmark_stats(data)
    assert set(fields) | {"data", "iterations"} == set(ours)
    assert ours["data"] == data and ours["iterations"] == 1 and ours["rounds"] == len(data)
    assert ours["min"] == min(data) and ours["max"] == max(data)
    assert ours["mean"] == pytest.approx(statistics.fmean(data))
    assert ours["median"] == pytest.approx(statistics.median(data))
    assert ours["ops"] == pytest.approx(len(data) / sum(data))
    assert min(data) <= ours["ld15iqr"] <= ours["hd15iqr"] <= max(data)


def test_benchmark_json_one_benchmark_per_cell_ops_is_tok_per_s() -> None:
    doc = benchmark_json(synthetic())
    names = [b["name"] for b in doc["benchmarks"]]
    cells = [(c, p) for c in ("baseline", "draft-d4") for p in ("p1", "p2")]
    assert names == [f"test_throughput[{c}-{p}]" for c, p in cells]
    p2 = doc["benchmarks"][3]
    assert p2["group"] == "p2" and p2["params"] == {"spec_config": "draft-d4", "prompt": "p2"}
    assert p2["stats"]["data"] == pytest.approx([1 / 60, 1 / 62])  # failed, invalid: no number
    assert p2["stats"]["ops"] == pytest.approx(statistics.harmonic_mean([60.0, 62.0]))
    assert p2["extra_info"]["failed_runs"] == 1 and p2["extra_info"]["invalid_runs"] == 1
    assert p2["extra_info"]["accept_length"] == 2.0
    assert doc["specdec"]["skipped"] == [
        {"config": "broken", "prompt": p, "reason": "llama-server exited (code 1)\nE: bad"}
        for p in ("p1", "p2")
    ]
    assert doc["commit_info"]["id"] == "abc123" and doc["machine_info"]["node"] == "ci-1"
    json.dumps(doc, allow_nan=False)


def assert_pytest_benchmark_accepts(path: Path, expected: list[str]) -> None:
    """Load through pytest-benchmark's storage (as ``compare`` does), then run its CLI."""
    file_storage: Any = importlib.import_module("pytest_benchmark.storage.file").FileStorage

    class Logger:
        def __init__(self) -> None:
            self.warnings: list[str] = []

        def warning(self, text: str, **kw: Any) -> None:
            self.warnings.append(text)

        def info(self, text: str, **kw: Any) -> None:
            pass

    logger = Logger()
    storage = file_storage(path.parent / ".storage", logger=logger)
    loaded = list(storage.load_benchmarks(str(path)))
    assert logger.warnings == []  # a file it cannot read is only a warning there
    assert sorted(b["name"] for b in loaded) == sorted(expected)
    assert all(b["ops"] == pytest.approx(b["rounds"] / b["total"]) for b in loaded)
    cli = [sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--columns=ops"]
    done = subprocess.run(cli, capture_output=True, text=True, cwd=path.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Failed to load" not in done.stdout + done.stderr
    assert all(name in done.stdout for name in expected)


def test_pytest_benchmark_compare_accepts_the_file(tmp_path: Path) -> None:
    doc = benchmark_json(synthetic())
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    assert_pytest_benchmark_accepts(path, [b["name"] for b in doc["benchmarks"]])


# ------------------------------------------------------------------------------------ JUnit


def test_junit_properties_from_record_and_judgement() -> None:
    doc = synthetic()
    record = ConfigRecord.from_dict(doc["configs"][1])
    props = dict(junit_properties(record, "p1", doc["verdicts"][0]))
    assert props["specdec_tok_per_s_mean"] == "120.000"
    half = 4.302652729911275 * 4 / math.sqrt(3)
    assert props["specdec_tok_per_s_ci95_half"] == f"{half:.3f}"
    assert props["specdec_accept_length"] == "2.500" and props["specdec_runs"] == "3"
    assert props["specdec_verdict"] == "IMPROVED" and props["specdec_suite_verdict"] == "REGRESSED"
    assert props["specdec_ratio"] == "1.200 [1.100, 1.300] 90%"
    props = dict(verdict_properties(Judgement("x", "judged", "tok/s UNCHANGED", "baseline")))
    assert props["specdec_accept_verdict"] == "null" and props["specdec_verdict"] == "JUDGED"
    props = dict(junit_properties(doc["configs"][1], "p2", None))
    assert props["specdec_failed_runs"] == "1" and props["specdec_invalid_runs"] == "1"
    assert props["specdec_runs"] == "2" and props["specdec_verdict"] == "null"
    assert all(isinstance(v, str) for v in props.values())


# ------------------------------------------------------------------------------------ charts


def need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing("matplotlib is not installed", "pip install 'pytest-specdec[plot]'")


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 5_000, f"{path}: {len(data)} bytes"


def test_results_chart_writes_a_png(tmp_path: Path) -> None:
    need_matplotlib()
    out = results_chart(synthetic(), tmp_path / "sub" / "results.png")
    assert_png(out)


def test_a_chart_of_load_levels_only_is_refused_naming_the_site(tmp_path: Path) -> None:
    need_matplotlib()
    doc = load_results(REPO / "docs" / "gpu-run" / "load" / "h200-load.json.gz")
    with pytest.raises(ChartInputError, match=r"load levels only.*specdec report site"):
        results_chart(doc, tmp_path / "load.png")
    assert not (tmp_path / "load.png").exists()


def test_report_tables_survive_carriage_returns_and_keep_their_columns() -> None:
    """A CR or CRLF in a name or a message ends no table row; the level verdicts' table has
    an alignment for each of its columns, so GitHub renders it as a table."""
    assert md("b4000\r\n(build abc)") == "b4000<br>(build abc)" == md("b4000\r(build abc)")
    assert code("quick\r\nsort") == "`quick sort`"
    doc = load_results(REPO / "docs" / "gpu-run" / "load" / "h200-load.json.gz")
    lines = markdown_summary(doc).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("#### Level verdicts"))
    header, rule = lines[at + 2], lines[at + 3]
    assert header.count(" | ") == rule.count(" | ") == 8


def test_a_results_file_with_nan_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text('{"schema": 1, "configs": [], "workload": {}, "x": NaN}', encoding="utf-8")
    with pytest.raises(ResultsError, match=r"nan\.json is not valid JSON: NaN where a number"):
        load_results(path)


def write_baseline(path: Path, config: str, days: list[int], base: float) -> None:
    sessions = []
    for i, day in enumerate(days):
        runs = [base * (1 + 0.01 * i) * f for f in (0.98, 1.0, 1.02)]
        s = SessionSummary.from_values(runs)
        suite = {"n": s.n, "mean_log": s.mean_log, "sd_log": s.sd_log, "runs": runs}
        sessions.append(
            {"started_at": f"2026-01-{day:02d}T02:00:00+00:00", "engine_version": f"b{day // 3}",
             "prompts": {"p1": suite}, "suite": suite}
        )  # fmt: skip
    key = {"config": config, "engine": "llamacpp", "hardware": {"name": "Test CPU"}}
    atomic_write_json(path, Baseline(path, key, sessions).to_dict())


def test_trend_chart_writes_a_png_from_baseline_files_and_folders(tmp_path: Path) -> None:
    need_matplotlib()
    write_baseline(tmp_path / "bl" / "a.json", "baseline", [1, 2, 3, 5, 8], 70.0)
    write_baseline(tmp_path / "bl" / "b.json", "draft-d4", [1, 2, 4, 5, 8], 84.0)
    files = [tmp_path / "bl" / "a.json", tmp_path / "bl" / "b.json"]
    assert_png(trend_chart(files, tmp_path / "t.png"))
    assert_png(trend_chart([tmp_path / "bl"], tmp_path / "t2.png"))
    with pytest.raises(ValueError, match="does not exist"):
        trend_chart([tmp_path / "missing.json"], tmp_path / "t3.png")


def test_charts_without_matplotlib_name_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ChartsUnavailable, match=r"pip install 'pytest-specdec\[plot\]'"):
        results_chart(synthetic(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ChartsUnavailable, match="matplotlib, which is not installed"):
        check_available()


def test_chart_commands_without_matplotlib_exit_2_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r.json"
    atomic_write_json(results, synthetic())
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert cli_main(["report", "chart", str(results), str(tmp_path / "x.png")]) == 2
    assert "pip install 'pytest-specdec[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_trend_of_missing_or_empty_baselines_exits_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing_file = tmp_path / "missing.json"
    assert cli_main(["report", "trend", str(missing_file), str(tmp_path / "t.png")]) == 2
    assert f"baseline {missing_file} does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli_main(["report", "trend", str(tmp_path / "empty"), str(tmp_path / "t.png")]) == 2
    assert f"no baseline files in {tmp_path / 'empty'}" in capsys.readouterr().err


def test_chart_option_without_matplotlib_is_refused_before_measuring(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--specdec-chart", "c.png", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdec-chart: PNG charts need matplotlib*[[]plot[]]*"])


# ------------------------------------------------------------------------ real results file


def test_real_results_file(tmp_path: Path) -> None:
    if not REAL_RESULTS.is_file():
        pytest.skip(f"no results file at {REAL_RESULTS}: run `pytest suites` to make one")
    results = load_results(REAL_RESULTS)
    records = [ConfigRecord.from_dict(c) for c in results["configs"]]
    prompts = list(results["workload"]["prompts"])
    text = markdown_summary(results)
    for record in records:  # every config with the suite score the terminal table shows
        geo = suite_geomean(config_cells(record, prompts))
        cell = f"**{geo:.1f}** |" if geo is not None else "- |"
        assert any(
            line.startswith(f"| `{record.name}` |") and line.endswith(cell)
            for line in text.splitlines()
        ), record.name
    doc = benchmark_json(results)
    ok = sum(1 for r in records for x in r.measured() if x.ok and x.tok_per_s and not x.invalid)
    assert sum(b["stats"]["rounds"] for b in doc["benchmarks"]) == ok
    path = tmp_path / "real.json"
    path.write_text(json.dumps(doc))
    assert_pytest_benchmark_accepts(path, [b["name"] for b in doc["benchmarks"]])
    need_matplotlib()
    assert_png(results_chart(results, tmp_path / "real.png"))
