"""The load levels on the dashboard: the run page's curves (aggregate output tok/s against
clients, the speedup over the plain config with y = 1 and the crossover), its levels' and
verdicts' tables, a key page's level history, and keys whose sessions measured load levels only
(no suite score). Synthetic documents are made by the package's own functions (rounds from
``summarize_round``, verdicts from ``judge_load_reference``, baseline entries from
``session_entries``); ``tests/data/site-load`` is a real run of llama-server on the CPU:

    pytest suites/test_concurrency.py suites/test_throughput.py --specdec-config-file np.toml \\
      --spec-config np2,draft-np2 --specdec-concurrency 1,2,4 --specdec-rounds 2 \\
      --specdec-runs 2 --specdec-max-tokens 16 --specdec-ignore-eos --specdec-reference np2 \\
      --specdec-update-baselines   # after a first run of test_concurrency.py alone

(``np2``: ``-np 2 -c 4096``; ``draft-np2``: the same with ``--spec-type draft-simple
--spec-draft-n-max 4`` and a draft model), its results file written compactly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import bench

from pytest_specdec.core.results import RunRecord, atomic_write_json, finalize_timings
from pytest_specdec.measure.levels import rounds_of, summarize_level, summarize_round
from pytest_specdec.report.load import level_rows
from pytest_specdec.report.site import SiteSummary, build_site
from pytest_specdec.report.site_load import (
    log_ticks,
    speedup_spec,
    throughput_spec,
    without_mermaid,
)
from pytest_specdec.verdict.baselines import BASELINE_SCHEMA, baseline_path, key_for
from pytest_specdec.verdict.crossover import crossover_of
from pytest_specdec.verdict.load import LevelJudgement, judge_load_reference
from pytest_specdec.verdict.sessions import session_entries
from pytest_specdec.verdict.stats import VerdictPolicy, welch_log

REAL = Path(__file__).resolve().parent / "data" / "site-load"
POLICY = VerdictPolicy()
LEVELS = (1, 4, 16, 64)


def spec_of(page: str, element: str) -> dict[str, Any]:
    found = re.search(rf'id="{re.escape(element)}-spec">(.*?)</script>', page, re.S)
    assert found, f"no chart {element} on the page"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def record(client: int, index: int, tokens: int = 32) -> RunRecord:
    rec = RunRecord(config="c", prompt=f"p{index}", run=1, phase="load", extra={"client": client})
    rec.output_tokens, rec.wall_s, rec.ttft_s, rec.verify_steps = tokens, 0.5, 0.1, tokens // 4
    return finalize_timings(rec)


def config(name: str, levels: dict[int, float], seed: int, speculative: bool,
           rounds: int = 5, night: int = 0) -> dict[str, Any]:  # fmt: skip
    """A config record measured at ``levels`` (clients -> tok/s), ``rounds`` rounds each with
    1% noise, its rounds made by summarize_round."""
    rng = np.random.default_rng(seed)
    load = []
    for clients, level in levels.items():
        for n in range(1, rounds + 1):
            r = summarize_round(clients, n, 1, [record(c, 0) for c in range(clients)], 1.0)
            load.append({**r.to_dict(), "output_tok_per_s": level * math.exp(rng.normal(0, 0.01)),
                         "accept_length": 3.0 if speculative else None})  # fmt: skip
    args = ["--spec-type", "draft-simple"] if speculative else []
    return {
        "name": name, "engine": "llamacpp", "engine_version": f"b{1000 + night}",
        "config": {"name": name, "args": ["-np", "64", *args]},
        "models": {"target": {"id": "t.gguf", "sha256": "t" * 64}}, "runs": [],
        "extra": {"load": load, "load_limits": {"slots": 16, "slots_flag": "-np"}},
    }  # fmt: skip


def document(night: int = 0, spec_name: str = "draft-d4") -> dict[str, Any]:
    """A night of a plain and a speculative config at 1, 4, 16, 64 clients: the speculative
    one pays 1.4x at 1 client and loses at 16 and 64 (the crossover between 4 and 16); the
    verdicts are the A/B per level against the plain config, as the plugin writes them."""
    plain = config("plain", {c: 100.0 * c**0.8 for c in LEVELS}, night, False, night=night)
    ratios = dict(zip(LEVELS, (1.4, 1.2, 0.85, 0.7), strict=True))
    spec = config(spec_name, {c: 100.0 * c**0.8 * ratios[c] for c in LEVELS}, night + 50, True,
                  night=night)  # fmt: skip
    judged = judge_load_reference(spec, plain, POLICY).to_dict()
    stored = crossover_of("plain", [  # the stored baselines' curve: it fell a little later
        LevelJudgement(c, welch_log([r * 99, r * 100, r * 101], [99.0, 100, 101], POLICY), "")
        for c, r in zip(LEVELS, (1.45, 1.25, 0.95, 0.75), strict=True)
    ])  # fmt: skip
    assert stored is not None
    judged["baseline_crossover"] = stored.to_dict()
    started = f"{np.datetime64('2026-11-01T02:00') + np.timedelta64(night, 'D')}:00+00:00"
    return {
        "schema": 1, "started_at": started, "finished_at": started,
        "host": {"hostname": "runner", "cpu_model": "Test CPU", "cpu_count": 8},
        "gpu": {"devices": [{"name": "NVIDIA H200", "driver_version": "580.1"}]},
        "options": {"max_tokens": 64, "reference": "plain", "runs": 5, "commit": f"c{night}"},
        "workload": {"name": "seed", "sha256": "ab" * 32, "prompts": ["p0"]},
        "configs": [plain, spec],
        "verdicts": [{"config": spec_name, "outcome": "LOAD-ONLY", "status": "load-only",
                      "message": "load levels only", "load": judged}],
    }  # fmt: skip


def with_suite(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its prompt also measured one request at a time (5 runs per config), as
    suites/test_throughput.py adds them."""
    for c in doc["configs"]:
        c["runs"] = [
            {"config": c["name"], "prompt": "p0", "run": i, "phase": "measure", "error": None,
             "tok_per_s": 100.0 + i, "session": 1, "ok": True,
             "accept_length": 3.0 if c["name"] != "plain" else None}
            for i in range(5)
        ]  # fmt: skip
    return doc


# --------------------------------------------------------------------------- chart specs


def test_the_throughput_chart_has_each_levels_ci_as_a_band_and_each_round() -> None:
    doc = document()
    spec = throughput_spec(doc["configs"])
    band, line, rounds, points = spec["layer"]
    assert band["mark"]["type"] == "area" and band["mark"]["clip"] is True
    assert band["encoding"]["y"]["field"] == "lo" and band["encoding"]["y2"]["field"] == "hi"
    assert band["encoding"]["y"]["stack"] is None  # the configs' bands are not stacked
    x = line["encoding"]["x"]
    assert x["scale"]["type"] == "log" and x["axis"]["values"] == list(LEVELS)
    values = {(v["config"], v["clients"]): v for v in spec["data"]["values"]}
    assert len(values) == 8 and len(rounds["data"]["values"]) == 40  # 2 configs x 4 x 5 rounds
    level = summarize_level(rounds_of(doc["configs"][1], 16))
    cell = values[("draft-d4", 16)]
    assert level.output_tok_per_s is not None and level.ci_half is not None
    assert cell["tok_s"] == pytest.approx(level.output_tok_per_s, abs=0.01)
    assert cell["lo"] == pytest.approx(level.output_tok_per_s / (1 + level.ci_half), abs=0.01)
    assert cell["hi"] == pytest.approx(level.output_tok_per_s * (1 + level.ci_half), abs=0.01)
    assert cell["accept"] == 3.0 and values[("plain", 16)]["accept"] is None
    top = spec["layer"][1]["encoding"]["y"]["scale"]["domain"][1]
    assert top >= max(v["tok_s"] for v in rounds["data"]["values"])
    assert {t["title"] for t in points["encoding"]["tooltip"] if "title" in t} >= {
        "tok/s", "95% CI", "failed rounds", "decode tok/s p50", "TTFT p50 ms"}  # fmt: skip


def test_a_failed_round_is_no_dot_and_counts_as_failed() -> None:
    doc = document()
    doc["configs"][0]["extra"]["load"][0].update(output_tok_per_s=None, failed=1,
                                                 errors=["client 0 p0: boom"])  # fmt: skip
    spec = throughput_spec(doc["configs"])
    plain_1 = next(v for v in spec["data"]["values"] if (v["config"], v["clients"]) == ("plain", 1))
    assert plain_1["rounds"] == 4 and plain_1["failed"] == 1
    assert len(spec["layer"][2]["data"]["values"]) == 39


def test_the_speedup_chart_marks_one_the_crossover_and_its_band() -> None:
    load = document()["verdicts"][0]["load"]
    tonight = load["crossover"]
    assert tonight["where"] == "at" and 4 < tonight["estimate"] < 16
    spec = speedup_spec(load)
    assert spec is not None
    band, one, bars, line, points, estimate, stored_estimate = spec["layer"]
    assert band["mark"]["type"] == "rect"
    (edges,) = band["data"]["values"]
    assert edges["from"] == pytest.approx(tonight["low"]["clients"])
    assert edges["to"] == pytest.approx(tonight["high"]["clients"])
    assert edges["from"] <= tonight["estimate"] <= edges["to"] and edges["text"] == tonight["text"]
    assert one["data"]["values"] == [{"one": 1.0}] and one["encoding"]["y"]["field"] == "one"
    assert line["encoding"]["y"]["scale"]["type"] == "log"  # log-log, as it is interpolated
    assert bars["encoding"]["y"]["field"] == "lo" and bars["encoding"]["y2"]["field"] == "hi"
    assert points["encoding"]["shape"]["field"] == "state"
    assert estimate["data"]["values"][0]["clients"] == tonight["estimate"]
    stored = load["baseline_crossover"]
    assert stored_estimate["data"]["values"][0]["clients"] == stored["estimate"]
    assert stored_estimate["mark"]["strokeDash"] == [6, 4]  # dashed: the stored baselines'
    assert tonight["estimate"] < stored["estimate"]
    curves = {(v["curve"], v["clients"]): v for v in spec["data"]["values"]}
    assert curves[("tonight", 64)]["state"] == "loses" and curves[("tonight", 1)]["state"] == "pays"
    assert ("stored baselines", 1) in curves  # the stored baselines' curve beside tonight's
    assert 1.0 in line["encoding"]["y"]["axis"]["values"]


def test_the_specs_compile_to_vega_with_their_legends() -> None:
    """Vega-Lite's own compiler (the wheel the site's bundle comes from) takes each spec, and
    the legends survive the layering: the configs' colours, the curves' colours and the
    states' shapes."""
    import vl_convert

    def legends(spec: dict[str, Any] | None) -> list[str | None]:
        assert spec is not None
        vega = vl_convert.vegalite_to_vega(json.dumps(spec))
        return [legend.get("title") for legend in vega.get("legends", [])]

    doc = document()
    assert legends(throughput_spec(doc["configs"])) == ["config"]
    assert legends(speedup_spec(doc["verdicts"][0]["load"])) == [None, "CI against 1"]


def test_log_ticks_are_the_coarsest_that_give_four() -> None:
    assert log_ticks([0.68, 1.45]) == [0.7, 0.8, 0.9, 1.0, 1.2, 1.4]
    assert log_ticks([0.03, 2.9, None]) == [0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
    assert log_ticks([0.5, 2.0]) == [0.5, 0.7, 1.0, 1.5, 2.0]
    assert log_ticks([0.01, 100.0]) == [0.01, 0.1, 1.0, 10.0, 100.0]


def test_a_curve_that_never_falls_has_no_estimate_and_one_without_points_no_chart() -> None:
    load = document()["verdicts"][0]["load"]
    pays = {
        **load["crossover"],
        "where": "above",
        "estimate": None,
        "low": {"where": "at", "clients": 20.0},
        "high": {"where": "above", "clients": None},
    }
    spec = speedup_spec({"crossover": pays})
    assert spec is not None
    band = spec["layer"][0]
    assert band["data"]["values"][0]["from"] == 20.0 and band["data"]["values"][0]["to"] == 64.0
    assert not any(layer["mark"].get("strokeWidth") == 2 for layer in spec["layer"])  # no estimate
    never = {**pays, "where": "below", "low": {"where": "below", "clients": None},
             "high": {"where": "below", "clients": None}}  # fmt: skip
    spec = speedup_spec({"crossover": never})
    assert spec is not None and spec["layer"][0]["mark"]["type"] == "rule"  # no band
    assert speedup_spec({"crossover": None, "baseline_crossover": None}) is None


def test_the_reports_mermaid_charts_give_way_to_a_pointer() -> None:
    text = "a\n```mermaid\nxychart-beta\n    line [1, 2]\n```\n_line 1: x, line 2: y_\nb\n"
    assert without_mermaid(text) == "a\n(drawn as a chart above, under Load levels)\nb\n"


# --------------------------------------------------------------------------- pages


def _site(
    tmp_path: Path, docs: Sequence[dict[str, Any]], stored: Sequence[dict[str, Any]] = ()
) -> SiteSummary:
    """A site of ``docs`` as results files and ``stored`` as baseline files (one per key)."""
    for i, doc in enumerate(docs):
        atomic_write_json(tmp_path / "results" / f"night{i}.json", doc)
    sessions: dict[Path, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for doc in stored:
        for c in doc["configs"]:
            key = key_for(doc, c)
            sessions.setdefault(baseline_path(tmp_path / "b", key), (key, []))[1].extend(
                session_entries(doc, c))  # fmt: skip
    for path, (key, entries) in sessions.items():
        atomic_write_json(path, {"schema": BASELINE_SCHEMA, "key": key, "sessions": entries})
    results = [tmp_path / "results"] if docs else []
    return build_site(tmp_path / "site", tmp_path / "b", results)


def test_the_run_page_draws_the_curves_and_lists_the_levels_and_verdicts(tmp_path: Path) -> None:
    doc = document()
    site = _site(tmp_path, [doc])
    (run,) = site.data.runs
    page = (site.out / "runs" / f"{run.slug}.html").read_text(encoding="utf-8")
    assert 'src="../assets/vega-bundle.js"' in page  # the run page now draws charts
    assert spec_of(page, "load-throughput")["layer"][0]["mark"]["type"] == "area"
    assert spec_of(page, "load-speedup-0")["layer"][1]["data"]["values"] == [{"one": 1.0}]
    section = page[page.index("<h2>Load levels</h2>") : page.index("<h2>Engine commands</h2>")]
    for row in level_rows(doc["configs"][1]):
        assert "".join(f"<td>{v}</td>" for v in row) in section.replace(' class="num"', "")
    assert section.count('class="verdict IMPROVED"') == 2  # 1 and 4 clients pay
    assert section.count('class="verdict REGRESSED"') == 2  # 16 and 64 lose
    assert "crossover (tonight): stops paying at about" in section
    assert "crossover (stored baselines)" in section
    assert "<h3>Speedup of <code>draft-d4</code> over <code>plain</code></h3>" in section
    assert spec_of(page, "load-speedup-0")["layer"][3]["encoding"]["y"]["title"] == (
        "speedup over plain"
    )
    assert "draft-d4 at 64 clients: queued by its settings: 64 clients, 16 requests" in section
    assert "draft-d4 at 16 clients" not in section  # as many clients as slots: not queued
    assert "xychart-beta" not in page and "(drawn as a chart above, under Load levels)" in page


def test_a_comparison_curve_is_drawn_over_its_speculative_reference(tmp_path: Path) -> None:
    """A tree against a chain (both speculative): the run page draws its curve, titled and
    scaled over the chain by name, and says where the tree stops being the faster."""
    doc = document()
    plain, spec = doc["configs"]
    plain["config"]["args"] = ["--speculative-algorithm", "DFLASH"]
    doc["verdicts"][0]["load"] = judge_load_reference(spec, plain, POLICY).to_dict()
    page = _site(tmp_path, [doc]).out
    (run,) = (page / "runs").glob("*.html")
    html = run.read_text(encoding="utf-8")
    assert "<h3>Speedup of <code>draft-d4</code> over <code>plain</code></h3>" in html
    assert "crossover (tonight): stops being faster at about" in html
    assert "stops paying" not in html


def test_user_text_in_the_load_section_is_escaped(tmp_path: Path) -> None:
    doc = document(spec_name="<img src=x onerror=alert(1)>")
    site = _site(tmp_path, [doc])
    (run,) = site.data.runs
    page = (site.out / "runs" / f"{run.slug}.html").read_text(encoding="utf-8")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "\\u003cimg src=x" in page  # in the chart data, no text can close the script


def test_a_results_file_without_load_levels_has_no_load_section(tmp_path: Path) -> None:
    site_build = bench("site_build")  # the must-show site's night builder
    doc = site_build.night_doc(0, [("dflash-b16", 100.0, 3.0, "b1000")], np.random.default_rng(0))
    site = _site(tmp_path, [doc])
    (run,) = site.data.runs
    page = (site.out / "runs" / f"{run.slug}.html").read_text(encoding="utf-8")
    assert "Load levels" not in page and "vega-bundle.js" not in page


def test_load_only_sessions_make_a_key_with_its_levels_history_and_no_suite(
    tmp_path: Path,
) -> None:
    """Baseline sessions with ``suite: null`` and ``prompts: {}``: left out of the suite trend,
    shown in the key's level history; the overview says there is no suite score."""
    stored = [document(night) for night in range(3)]
    assert all(e["suite"] is None and e["prompts"] == {}
               for e in session_entries(stored[0], stored[0]["configs"][1]))  # fmt: skip
    site = _site(tmp_path, [document(3)], stored)
    views = {k.key["config"]: k for k in site.data.keys}
    spec = views["draft-d4"]
    assert spec.nights == [] and len(spec.load_nights) == 4 and spec.night_count == 4
    assert sorted(spec.load_nights[-1].levels) == list(LEVELS)
    assert spec.load_nights[-1].run == site.data.runs[0].slug
    index = (site.out / "index.html").read_text(encoding="utf-8")
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", index, re.S) if spec.slug in r)
    assert "load levels only" in row and "LOAD-ONLY" in row and ">4</td>" in row
    page = (site.out / "keys" / f"{spec.slug}.html").read_text(encoding="utf-8")
    assert "No suite score" in page and 'id="trend"' not in page
    history = spec_of(page, "load-history")
    assert history["facet"]["row"]["field"] == "clients"
    assert history["resolve"]["scale"]["y"] == "independent"
    assert len(history["data"]["values"]) == 16  # 4 nights x 4 levels
    cell = spec.load_nights[-1].levels[16]
    (last,) = [v for v in history["data"]["values"]
               if v["clients"] == 16 and v["night"] == spec.load_nights[-1].started_at]  # fmt: skip
    assert last["tok_s"] == pytest.approx(cell.tok_s, abs=0.01) and last["rounds"] == 5
    assert cell.ci_low is not None and last["lo"] == pytest.approx(cell.ci_low, abs=0.01)
    assert "Latest load night" in page and "Every load night (4)" in page


def test_a_key_with_suite_and_load_nights_keeps_its_trend_to_the_suite(tmp_path: Path) -> None:
    site = _site(tmp_path, [document(0), with_suite(document(1)), document(2)])
    view = next(k for k in site.data.keys if k.key["config"] == "draft-d4")
    assert len(view.nights) == 1 and len(view.load_nights) == 3 and view.night_count == 3
    assert view.latest_config is not None and view.latest_config["runs"]  # the suite night's
    page = (site.out / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
    assert len(spec_of(page, "trend")["data"]["values"]) == 1
    assert len(spec_of(page, "load-history")["data"]["values"]) == 12
    assert page.index("<h2>Load levels</h2>") < page.index("<h2>GPU telemetry")


def test_a_ci_bar_of_two_rounds_is_cut_within_the_levels_range(tmp_path: Path) -> None:
    wide = document(1)
    for r in wide["configs"][1]["extra"]["load"]:  # two rounds a level, far apart
        r["output_tok_per_s"] = 100.0 * (1.0 if r["round"] == 1 else 3.0)
    wide["configs"][1]["extra"]["load"] = [
        r for r in wide["configs"][1]["extra"]["load"] if r["round"] <= 2
    ]
    site = _site(tmp_path, [document(0), wide])
    view = next(k for k in site.data.keys if k.key["config"] == "draft-d4")
    page = (site.out / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
    values = spec_of(page, "load-history")["data"]["values"]
    cell = view.load_nights[-1].levels[1]
    assert cell.ci_high is not None and cell.ci_high > 1000  # t(1) = 12.7: a huge interval
    shown = max(v["hi"] for v in values if v["clients"] == 1)
    assert shown == pytest.approx(max(n.levels[1].tok_s for n in view.load_nights) * 1.5, abs=0.01)


def test_pages_build_from_a_real_llama_server_run(tmp_path: Path) -> None:
    """The committed run: a load-only night in the baselines, then a night with the suite and
    the load levels, A/B against the plain config (its speedup curve and the stored one)."""
    site = build_site(tmp_path / "site", REAL / "baselines", [REAL / "llamacpp-np2-load.json"])
    views = {k.key["config"]: k for k in site.data.keys}
    assert set(views) == {"np2", "draft-np2"}
    for view in views.values():
        assert len(view.nights) == 1 and len(view.load_nights) == 2
        assert all(sorted(n.levels) == [1, 2, 4] for n in view.load_nights)
        page = (site.out / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
        assert len(spec_of(page, "load-history")["data"]["values"]) == 6
    (run,) = site.data.runs
    page = (site.out / "runs" / f"{run.slug}.html").read_text(encoding="utf-8")
    throughput = spec_of(page, "load-throughput")
    assert {v["config"] for v in throughput["data"]["values"]} == {"np2", "draft-np2"}
    speedup = spec_of(page, "load-speedup-0")
    assert {v["curve"] for v in speedup["data"]["values"]} == {"tonight", "stored baselines"}
    assert "Levels of <code>draft-np2</code>" in page and "Level verdicts" in page
    assert "requests at once: 2 (-np)" in page
