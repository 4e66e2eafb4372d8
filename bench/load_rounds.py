"""What the first rounds of a load level cost a verdict: the rounds' spread and each level's
A/B verdict between two results files (two boots), with the first ``--skip`` rounds of every
level left out, as if they had been warm-up rounds.

    python bench/load_rounds.py OLD.json[.gz] NEW.json[.gz] --skip 0 --skip 1

Prints, per config and level, the within-level CV of the rounds on each side and the ratio,
90% CI and MDE of the verdict (provisional Welch on the rounds, one boot a side), per skip.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_specdec.core.results import load_results
from pytest_specdec.measure.levels import levels_of, rounds_of
from pytest_specdec.verdict.compare import session_verdict
from pytest_specdec.verdict.stats import VerdictPolicy


def level_values(config: dict[str, Any], clients: int, skip: int) -> list[float]:
    rounds = [r for r in rounds_of(config, clients) if r.ok and r.output_tok_per_s]
    return [float(r.output_tok_per_s) for r in rounds if r.round > skip]  # type: ignore[arg-type]


def cv(values: Sequence[float]) -> float:
    logs = np.log(values)
    return float(np.std(logs, ddof=1)) if len(values) > 1 else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--skip", type=int, action="append", default=None)
    args = parser.parse_args(argv)
    old, new = (load_results(p) for p in (args.old, args.new))
    before = {c["name"]: c for c in old["configs"]}
    policy = VerdictPolicy()
    print("| config | clients | skip | rounds | CV old / new | ratio [90% CI] | MDE |")
    print("|---|---:|---:|---:|---|---|---:|")
    for cfg in new["configs"]:
        ref = before.get(cfg["name"])
        if ref is None:
            continue
        for clients in levels_of(cfg):
            for skip in args.skip or [0, 1]:
                a, b = level_values(cfg, clients, skip), level_values(ref, clients, skip)
                if len(a) < 2 or len(b) < 2:
                    continue
                v = session_verdict([a], [b], policy)
                print(f"| {cfg['name']} | {clients} | {skip} | {len(a)} | {cv(b):.1%} / "
                      f"{cv(a):.1%} | {v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}] | "
                      f"{v.mde:.1%} |")  # fmt: skip
    means = [statistics.fmean(level_values(c, lv, 0)) for c in new["configs"]
             for lv in levels_of(c) if level_values(c, lv, 0)]  # fmt: skip
    print(f"{len(means)} levels compared")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
