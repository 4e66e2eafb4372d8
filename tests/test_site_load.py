"""Keys whose server sessions measured load levels: their load nights (per night and client
count, the level's aggregate output tok/s with its CI), and keys with load levels only (no suite
score) on the overview and their page. Synthetic documents are made by the package's own
functions (rounds from ``summarize_round``, verdicts from ``judge_load_reference``, baseline
entries from ``session_entries``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_specdec.core.results import RunRecord, atomic_write_json, finalize_timings
from pytest_specdec.measure.levels import summarize_round
from pytest_specdec.report.site import SiteSummary, build_site
from pytest_specdec.verdict.baselines import BASELINE_SCHEMA, baseline_path, key_for
from pytest_specdec.verdict.crossover import crossover_of
from pytest_specdec.verdict.load import LevelJudgement, judge_load_reference
from pytest_specdec.verdict.sessions import session_entries
from pytest_specdec.verdict.stats import VerdictPolicy, welch_log

POLICY = VerdictPolicy()
LEVELS = (1, 4, 16, 64)


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


def test_load_only_sessions_make_a_key_with_its_load_nights_and_no_suite(
    tmp_path: Path,
) -> None:
    """Baseline sessions with ``suite: null`` and ``prompts: {}``: left out of the suite trend,
    kept as the key's load nights; the overview says there is no suite score."""
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


def test_a_key_with_suite_and_load_nights_keeps_its_trend_to_the_suite(tmp_path: Path) -> None:
    site = _site(tmp_path, [document(0), with_suite(document(1)), document(2)])
    view = next(k for k in site.data.keys if k.key["config"] == "draft-d4")
    assert len(view.nights) == 1 and len(view.load_nights) == 3 and view.night_count == 3
    assert view.latest_config is not None and view.latest_config["runs"]  # the suite night's
    page = (site.out / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
    assert re.search(r'id="trend-spec">.*?"values":\[\{"night":"[^"]*"[^\]]*\}\]', page)
    assert "No suite score" not in page
