"""The nightly dashboard at scale, and the store behind its screenshot.

    python bench/site_build.py                      # 100 nights x 20 keys: time and size
    python bench/site_build.py --nights 40 --keys 4
    python bench/site_build.py --must-show OUT_DIR  # the committed H200 results + baselines
                                                    # and a seeded 40-night key, 4% step

Nightly results documents are made as the plugin writes them (measured runs with GPU
telemetry, verdicts), turned into baseline sessions by the package's own
``session_entries`` and stored as baseline files; the last night's documents are kept as
results files beside them, as the nightly workflow has them. The site is then built once and
its build time and size printed (docs/dashboard.md quotes them).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout

from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.report.site import SiteSummary, build_site
from pytest_specdec.verdict.baselines import BASELINE_SCHEMA, baseline_path, key_for
from pytest_specdec.verdict.sessions import session_entries

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("fibonacci", "quicksort", "arithmetic", "json_parse", "haiku")
GPUS = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
ENGINES = ("sglang", "vllm")
CONFIGS = ("baseline", "ngram", "standalone-d16", "dflash-b16", "eagle3")


def _telemetry(rng: np.random.Generator) -> dict[str, Any]:
    def reading(center: float, spread: float) -> dict[str, float]:
        low, high = sorted(center + rng.normal(0, spread, 2))
        return {"min": low, "mean": (low + high) / 2, "median": (low + high) / 2, "max": high}

    return {"devices": [{
        "index": 0, "power_w": reading(420, 25), "sm_clock_mhz": reading(1975, 5),
        "mem_clock_mhz": reading(3201, 0.1), "gpu_temp_c": reading(52, 2),
        "mem_temp_c": reading(48, 2),
        "reasons_seen": ["sw_power_cap"] if rng.random() < 0.3 else [],
    }]}  # fmt: skip


def night_doc(
    night: int,
    configs: Sequence[tuple[str, float, float, str]],
    rng: np.random.Generator,
    gpu: str = GPUS[0],
    engine: str = ENGINES[0],
    model: str = "seeded-target.gguf",
) -> dict[str, Any]:
    """One night's results document: per config (name, suite tok/s, accept length, engine
    version) one server session of 5 runs per prompt (between-session 1.5%, within 2%)."""
    records, verdicts = [], []
    started = f"{np.datetime64('2026-08-01T02:00') + np.timedelta64(night, 'D')}:00+00:00"
    for name, tok_s, accept, version in configs:
        effect, runs = rng.normal(0.0, 0.015), []
        for p, prompt in enumerate(PROMPTS):
            for i in range(5):
                value = tok_s * (1.2 - 0.1 * p) * math.exp(effect + rng.normal(0.0, 0.02))
                runs.append({"config": name, "prompt": prompt, "run": i, "phase": "measure",
                             "error": None, "tok_per_s": value, "session": 1,
                             "accept_length": accept * (1.1 - 0.05 * p) if accept else None,
                             "gpu": _telemetry(rng), "ok": True})  # fmt: skip
        records.append({
            "name": name, "engine": engine, "config": {"name": name, "sha256": f"{name:x<64}"},
            "models": {"target": {"id": model, "sha256": f"{model:m<64}"}},
            "engine_version": version, "extra": {"engine_args": ["--tp", "1"]}, "runs": runs,
            "command": [f"/opt/{engine}/bin/server", "--model", model, "--api-key", "***"],
            "env": {"CUDA_VISIBLE_DEVICES": "0"}, "log_path": f"/runner/logs/{engine}-{name}.log",
        })  # fmt: skip
        verdicts.append({"config": name, "outcome": "UNCHANGED", "ratio": 1.0,
                         "message": "UNCHANGED: within the equivalence margin",
                         "acceptance": {"verdict": "UNCHANGED",
                                        "message": "accept length UNCHANGED: 1.002x"}})  # fmt: skip
    return {
        "schema": 1, "started_at": started, "finished_at": started,
        "host": {"hostname": "runner-1", "cpu_model": "Test CPU", "cpu_count": 64},
        "gpu": {"devices": [{"name": gpu, "driver_version": "580.1", "power_limit_w": 700.0}]},
        "options": {"max_tokens": 256, "commit": f"c{night:04d}", "runs": 5},
        "workload": {"name": "seed", "sha256": "ab" * 32, "prompts": list(PROMPTS)},
        "configs": records, "verdicts": verdicts,
    }  # fmt: skip


def seed(
    baselines: Path,
    results: Path,
    nights: int,
    configs: Sequence[str] = ("dflash-b16",),
    step_at: int | None = None,
    step: float = 0.04,
    gpu: str = GPUS[0],
    engine: str = ENGINES[0],
    seed_value: int = 7,
) -> list[dict[str, Any]]:
    """``nights`` nights of ``configs`` stored as baseline files (one session each), the
    last night also as a results file in ``results``; from ``step_at`` on, tok/s is lower by
    ``step`` and the engine version changes from b1000 to b1100."""
    rng = np.random.default_rng(seed_value)
    docs: list[dict[str, Any]] = []
    sessions: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for night in range(nights):
        changed = step_at is not None and night >= step_at
        level = 100.0 * (1 - step if changed else 1.0)
        entries = [(c, level * (1 + 0.3 * i), 0.0 if c == "baseline" else 3.0,
                    "b1100" if changed else "b1000")
                   for i, c in enumerate(configs)]  # fmt: skip
        doc = night_doc(night, entries, rng, gpu, engine)
        for config in doc["configs"]:
            key = key_for(doc, config)
            found = sessions.setdefault(str(baseline_path(baselines, key)), (key, []))
            found[1].extend(session_entries(doc, config))
        docs.append(doc)
    for path, (key, stored) in sessions.items():
        atomic_write_json(Path(path), {"schema": BASELINE_SCHEMA, "tool_version": "bench",
                                       "key": key, "sessions": stored})  # fmt: skip
    atomic_write_json(results / f"{engine}-{gpu.split()[1].lower()}-latest.json", docs[-1])
    return docs


def scale(work: Path, nights: int, keys: int) -> SiteSummary:
    """``keys`` keys (GPU x engine x config) of ``nights`` nights each, built into a site."""
    combos = [(g, e) for g in GPUS for e in ENGINES]
    per_combo = math.ceil(keys / len(combos))
    left = keys
    for i, (gpu, engine) in enumerate(combos):
        take = min(per_combo, left, len(CONFIGS))
        if take <= 0:
            break
        seed(work / "baselines", work / "results", nights, CONFIGS[:take], nights * 2 // 3,
             0.04, gpu, engine, seed_value=i)  # fmt: skip
        left -= take
    started = time.perf_counter()
    site = build_site(work / "site", work / "baselines", [work / "results"])
    print(f"built {nights} nights x {len(site.data.keys)} keys in "
          f"{time.perf_counter() - started:.2f} s: {len(site.files)} files, "
          f"{site.size / 1e6:.2f} MB (chart bundle "
          f"{(work / 'site/assets/vega-bundle.js').stat().st_size / 1e6:.2f} MB)")  # fmt: skip
    return site


def must_show(out: Path, work: Path) -> SiteSummary:
    """The committed H200 baselines and results, plus a seeded 40-night key with a 4% step
    at night 25 (engine b1000 → b1100)."""
    shutil.copytree(ROOT / "baselines", work / "baselines")
    docs = seed(work / "baselines", work / "results", 40, step_at=25)
    site = build_site(out, work / "baselines", [ROOT / "docs" / "gpu-run", work / "results"])
    print(site.describe().splitlines()[0])
    print(f"step night: {docs[25]['started_at']}")
    return site


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=100)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--must-show", type=Path, help="build the docs' site into this folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specdec-site-") as tmp:
        if args.must_show:
            must_show(args.must_show, Path(tmp))
        else:
            scale(Path(tmp), args.nights, args.keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
