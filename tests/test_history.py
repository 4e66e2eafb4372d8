"""Change points over nightly history, through the real baseline writer: a step found on its
night with the engine version named, a stationary store left alone, the nightly drift gate,
and the `specdec history` command."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import bench

from pytest_specdec.cli import main
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.verdict.baselines import load_baseline
from pytest_specdec.verdict.history import (
    HistoryPolicy,
    change_points,
    detect,
    drift,
    drift_for,
    load_series,
    noise_sd,
)
from pytest_specdec.verdict.nights import Night, nights
from pytest_specdec.verdict.sessions import update_baseline

PROMPTS = ("code", "prose")


def night_doc(
    night: int, tok_s: float, rng: np.random.Generator, engine: str, accept: float = 3.0
) -> dict[str, Any]:
    """One nightly results document of config draft-d4: one session of 5 runs per prompt
    (noise: between-session 1.5%, within 2%), as the plugin writes it."""
    effect = rng.normal(0.0, 0.015)
    runs = []
    for prompt, scale in zip(PROMPTS, (1.0, 0.8), strict=True):
        for i in range(5):
            value = tok_s * scale * math.exp(effect + rng.normal(0.0, 0.02))
            runs.append({"config": "draft-d4", "prompt": prompt, "run": i, "phase": "measure",
                         "error": None, "tok_per_s": value, "accept_length": accept,
                         "session": 1})  # fmt: skip
    gpu = {"name": "NVIDIA H200", "driver_version": "580.1", "power_limit_w": 700.0}
    config = {
        "name": "draft-d4", "engine": "llamacpp",
        "config": {"name": "draft-d4", "sha256": "cd" * 32},
        "models": {"target": {"id": "t.gguf", "sha256": "ef" * 32}}, "engine_version": engine,
        "extra": {"engine_args": ["-ngl", "99"]}, "runs": runs,
    }  # fmt: skip
    return {
        "schema": 1,
        "started_at": f"2026-10-{night + 1:02d}T02:00:00+00:00",
        "finished_at": f"2026-10-{night + 1:02d}T02:30:00+00:00",
        "host": {"hostname": "runner-1", "cpu_model": "Test CPU", "cpu_count": 8},
        "gpu": {"devices": [gpu]},
        "options": {"max_tokens": 256, "commit": f"c{night:03d}"},
        "workload": {"name": "seed", "sha256": "ab" * 32, "prompts": list(PROMPTS)},
        "configs": [config],
    }


def build_store(
    root: Path, n: int, step_at: int | None, step: float, seed: int = 3
) -> list[dict[str, Any]]:
    """n nights appended through update_baseline (the real writer); the engine changes from
    b1000 to b1100 at the night the step starts."""
    rng = np.random.default_rng(seed)
    docs = []
    for night in range(n):
        changed = step_at is not None and night >= step_at
        tok_s = 100.0 * (1 - step) if changed else 100.0
        doc = night_doc(night, tok_s, rng, "b1100" if changed else "b1000")
        update_baseline(doc, doc["configs"][0], root)
        docs.append(doc)
    return docs


def test_a_4pct_step_at_night_12_of_20_is_found_there_with_its_engine(tmp_path: Path) -> None:
    build_store(tmp_path, 20, step_at=12, step=0.04)
    (series,) = load_series(tmp_path)
    assert len(series.nights) == 20 and series.name.endswith("draft-d4--t-gguf.json")
    (point,) = series.points
    assert abs(point.index - 12) <= 1
    assert point.night == series.nights[point.index].started_at
    assert point.engine_after == "b1100" and "b1100" in point.engines()
    assert 0.94 < point.ratio < 0.98 and point.ci_high < 1.0
    assert point.accept_change == pytest.approx(0.0)
    assert point.n_before + point.n_after == 20


def test_a_stationary_40_night_store_has_no_change_point(tmp_path: Path) -> None:
    build_store(tmp_path, 40, step_at=None, step=0.0, seed=11)
    (series,) = load_series(tmp_path)
    assert len(series.nights) == 40 and series.points == []


def test_nights_group_a_runs_sessions_and_results_files_join_the_store(tmp_path: Path) -> None:
    docs = build_store(tmp_path / "b", 12, step_at=None, step=0.0)
    later = [night_doc(12 + i, 90.0, np.random.default_rng(i), "b1200") for i in range(6)]
    folder = tmp_path / "nightly"
    for i, doc in enumerate([docs[-1], *later]):  # the store's last night again: counted once
        atomic_write_json(folder / f"n{i}.json", doc)
    (folder / "other.json").write_text(json.dumps({"benchmarks": []}))  # not results: noted
    series = {s.name: s for s in load_series(tmp_path / "b", [folder])}
    main_series = next(s for name, s in series.items() if name.endswith(".json"))
    assert len(main_series.nights) == 18
    (point,) = main_series.points
    assert point.index == 12 and point.engine_after == "b1200" and point.ratio < 0.92
    assert any("other.json" in n for n in series["(inputs)"].notes)


def test_two_runners_started_in_the_same_second_are_two_nights() -> None:
    """A night is a run: its start and its host. Two runners' jobs that a cron started in the
    same second used to be averaged as one night; a run's several sessions stay one."""

    def entry(host: str | None, mean: float, session: int = 1) -> dict[str, Any]:
        return {"started_at": "2026-12-01T02:00:00+00:00", "host": host, "session": session,
                "suite": {"mean_log": math.log(mean)}}  # fmt: skip

    two = nights([entry("runner-a", 100.0), entry("runner-b", 90.0)])
    assert [n.key for n in two] == ["2026-12-01T02:00:00+00:00 on runner-a",
                                    "2026-12-01T02:00:00+00:00 on runner-b"]  # fmt: skip
    assert all(n.started_at == "2026-12-01T02:00:00+00:00" for n in two)
    assert [round(math.exp(n.mean_log)) for n in two] == [100, 90]
    (one,) = nights([entry("runner-a", 100.0), entry("runner-a", 90.0, session=2)])
    assert one.sessions == 2
    (older,) = nights([entry(None, 100.0), entry(None, 90.0)])  # stored before hosts were kept
    assert older.sessions == 2 and older.key == "2026-12-01T02:00:00+00:00"


def test_robust_noise_and_small_inputs() -> None:
    rng = np.random.default_rng(5)
    flat = list(rng.normal(0, 0.01, 60))
    stepped = flat[:30] + [v - 0.2 for v in flat[30:]]
    assert noise_sd(flat) == pytest.approx(0.01, rel=0.35)
    assert noise_sd(stepped) == pytest.approx(noise_sd(flat), rel=0.3)  # a step barely moves it
    assert noise_sd([1.0, 1.0, 1.0]) is None and noise_sd([1.0, 2.0]) is None
    assert detect([0.0, 0.1, 0.0]) == []
    assert detect(stepped) == [30]
    small = [v * 0.2 for v in stepped]  # a step of 0.04 in ln: 4%, above the floor
    assert detect(small) == [30]
    tiny = flat[:30] + [v - 0.015 for v in flat[30:]]  # 1.5%: under the 2% floor
    assert detect(tiny, HistoryPolicy(alpha=1.0)) == []


def test_policy_values_are_checked() -> None:
    for bad in ({"penalty": 0.0}, {"min_size": 1}, {"floor": 1.0}, {"alpha": 0.0}):
        with pytest.raises(ValueError, match="HistoryPolicy"):
            HistoryPolicy(**bad)


def make_nights(values: list[float], engine_from: int = 10**6) -> list[Night]:
    return [
        Night(f"2026-11-{i + 1:02d}T02:00", math.log(v), 1, 3.0,
              "b2" if i >= engine_from else "b1", None)
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_drift_gate_reports_a_drop_once_tonight_reveals_it() -> None:
    rng = np.random.default_rng(9)
    level = [100 * math.exp(rng.normal(0, 0.015)) for _ in range(30)]
    after = [95 * math.exp(rng.normal(0, 0.015)) for _ in range(8)]
    series = make_nights(level + after, engine_from=30)
    reported = []
    for t in range(31, len(series) + 1):
        found = drift(series[: t - 1], series[t - 1 : t])
        if found is not None:
            reported.append((t, found))
    (t, point), *rest = reported
    assert not rest  # reported on one night, not every night after
    assert abs(point.index - 30) <= 1 and point.drop and t - 30 <= 5
    assert point.describe().startswith(f"drift since {point.night}, engine b1 → b2: -")
    up = make_nights(level + [105 * math.exp(rng.normal(0, 0.015)) for _ in range(8)])
    assert all(drift(up[: t - 1], up[t - 1 : t]) is None for t in range(31, 39))  # a gain


def test_drift_for_a_results_document_against_its_baseline(tmp_path: Path) -> None:
    docs = build_store(tmp_path, 20, step_at=None, step=0.0, seed=4)
    rng = np.random.default_rng(12)
    tonight = [night_doc(20 + i, 93.0, rng, "b1300") for i in range(6)]
    found = None
    for doc in tonight:
        found = drift_for(doc, doc["configs"][0], tmp_path)
        if found:
            break
        update_baseline(doc, doc["configs"][0], tmp_path)
    assert found is not None and found.engine_after == "b1300" and found.ratio < 0.96
    baseline = load_baseline(next(tmp_path.rglob("draft-d4*.json")))
    assert baseline is not None and len(baseline.sessions) >= 20
    other = json.loads(json.dumps(docs[0]))
    other["options"]["max_tokens"] = 128  # another key: no history to speak of
    assert drift_for(other, other["configs"][0], tmp_path) is None


def test_specdec_history_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_store(tmp_path, 20, step_at=12, step=0.04)
    assert main(["history", "--baseline-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "change at night" in out and "engine b1000 → b1100" in out and "-4." in out
    assert main(["history", "--baseline-dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (series,) = doc["series"]
    (point,) = series["change_points"]
    assert series["nights"] == 20 and point["engine_after"] == "b1100"
    assert doc["policy"]["floor"] == 0.02
    # a mistyped folder is named, not read as an empty store; so is a config it lacks
    assert main(["history", "--baseline-dir", str(tmp_path / "none")]) == 2
    assert f"--baseline-dir {tmp_path / 'none'} is not a folder" in capsys.readouterr().err
    assert main(["history", "--baseline-dir", str(tmp_path), "--config", "nope"]) == 2
    assert "no history of config nope (configs there: " in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["history", "--baseline-dir", str(tmp_path / "empty")]) == 0
    assert "no baseline history" in capsys.readouterr().out
    assert main(["history", "--baseline-dir", str(tmp_path), "--penalty", "-1"]) == 2
    assert "HistoryPolicy.penalty is -1.0; it must be > 0" in capsys.readouterr().err


def test_change_points_of_nights_carry_accept_length_change() -> None:
    values = [100.0] * 10 + [80.0] * 10
    rng = np.random.default_rng(2)
    noisy = [v * math.exp(rng.normal(0, 0.01)) for v in values]
    series = [
        Night(f"n{i:02d}", math.log(v), 1, 4.0 if i < 10 else 3.0, "b1", None)
        for i, v in enumerate(noisy)
    ]
    (point,) = change_points(series)
    assert point.index == 10 and point.accept_change == pytest.approx(-0.25)
    assert nights([]) == []


# --------------------------------------------------------------------------- real engine


@pytest.mark.engine
def test_nightly_gate_reports_drift_on_a_real_run_and_fails_only_when_asked(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """A real run (llama-server on the CPU) judged against a history of 20 nights 20x faster
    (far beyond what load does to two short runs of the same engine: the outcome must not hinge
    on two real measurements reading alike):
    tonight's drop is a change point the gate reports (on tonight's night, or one before it:
    a segment needs two nights). The verdict itself (REGRESSED against that history) is kept
    out of the gate with --specdec-fail-on improved, so that only drift can fail the run."""
    first = suite_project.path / "first.json"
    common = ["suites/test_throughput.py", "--specdec-engine", "llamacpp", "--spec-config",
              "baseline", "--specdec-runs", "2", "--specdec-max-tokens", "16",
              "--specdec-baseline-dir", "bl", "-p", "no:cacheprovider"]  # fmt: skip
    result = suite_project.runpytest_subprocess(*common, "--specdec-results", str(first))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    real = json.loads(first.read_text())
    rng = np.random.default_rng(1)
    for night in range(20):
        doc = json.loads(json.dumps(real))
        doc["started_at"] = f"2026-09-{night + 1:02d}T02:00:00+00:00"
        for run in doc["configs"][0]["runs"]:
            if run.get("tok_per_s"):
                run["tok_per_s"] *= 20 * math.exp(rng.normal(0, 0.01))
        update_baseline(doc, doc["configs"][0], suite_project.path / "bl")
    tonight = suite_project.path / "tonight.json"
    reported = suite_project.runpytest_subprocess(
        *common, "--specdec-results", str(tonight), "--specdec-fail-on", "improved"
    )
    assert reported.ret == pytest.ExitCode.OK, reported.stdout.str()  # reported, not gating
    reported.stdout.fnmatch_lines(["baseline: drift since *: -*"])
    (found,) = json.loads(tonight.read_text())["drift"]
    assert found["config"] == "baseline" and found["ratio"] < 0.9 and found["index"] in (19, 20)
    gated = suite_project.runpytest_subprocess(
        *common, "--specdec-results", str(tonight), "--specdec-fail-on", "drift"
    )
    assert gated.ret == pytest.ExitCode.TESTS_FAILED, gated.stdout.str()
    gated.stdout.fnmatch_lines(["FAILED after Holm across configs:", "baseline: drift since *"])


def test_simulated_nights_meet_the_calibrated_rates() -> None:
    """The drift table's key rows (docs/history.md) on fewer, fixed-seed series: a 3% step
    at W 2% / B 1.5% with 3 sessions a night found within 5 nights, and few false change
    points on stationary nights."""
    cal = bench("calibration")

    policy = HistoryPolicy()
    rng = np.random.default_rng(2026)
    stationary = [cal.false_points(cal.night_means(rng, None, 100, 0.02, 0.015, 3), policy)
                  for _ in range(60)]  # fmt: skip
    assert sum(listed for listed, _ in stationary) / 60 <= 0.5
    step = cal.Drift(0.02, 0.015, 3, 0.03)
    found = [cal.first_found(cal.night_means(rng, step, 35, 0.02, 0.015, 3), step, policy)
             for _ in range(100)]  # fmt: skip
    within5 = sum(listed is not None and listed <= 5 for listed, _ in found) / 100
    gate5 = sum(gated is not None and gated <= 5 for _, gated in found) / 100
    assert within5 >= 0.85 and gate5 >= 0.85, (within5, gate5)


def test_trend_chart_marks_the_change_point(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from pytest_specdec.report import charts

    build_store(tmp_path / "bl", 20, step_at=12, step=0.04)
    baseline = load_baseline(next((tmp_path / "bl").rglob("*.json")))
    assert baseline is not None
    times = sorted(p[0] for _, p in charts._sessions(baseline))
    (mark,) = charts._change_points([baseline], {t: i for i, t in enumerate(times)})
    assert mark[0] == pytest.approx(11.5) and mark[1] == "change -4.0%"
    png = charts.trend_chart([tmp_path / "bl"], tmp_path / "trend.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
