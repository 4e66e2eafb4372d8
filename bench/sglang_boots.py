"""Boot-to-boot noise of each config, read from the results files of boots where nothing
changed, on both scores a verdict can judge (end-to-end and decode tok/s), and what it means
for a verdict against a stored history: δ, and the smallest drop a night can find (MDE).

    python bench/sglang_boots.py docs/gpu-run/sglang-boots/h200-session.json \\
        docs/gpu-run/sglang-boots/h200-rerun.json docs/gpu-run/sglang-boots/h200-rerun2.json

Each file holds one server session per config (a suite run); a config's boots are its
sessions across the files. Per config and score it prints each boot's suite score, the
between-boot CV (``between_session_cv``: the spread of the session means beyond what the
runs inside a session explain), the per-prompt boot-to-boot CV range, the decision threshold
δ = max(3%, 2 x CV), and the MDE of the prediction-interval test with K stored sessions and
m sessions tonight: (t(1 - alpha) + t(power), df K - 1) x CV x √(1/m + 1/K), at alpha 0.01 and
power 0.8 (docs/statistics.md). A night can gate a drop of max(δ, MDE). Last, what each boot cost
the machine (the results' ``extra.cost``).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.core.results import load_results  # noqa: E402
from pytest_specdec.core.values import SCORES  # noqa: E402
from pytest_specdec.verdict.planning import history_mde  # noqa: E402
from pytest_specdec.verdict.sessions import (  # noqa: E402
    by_session,
    suite_runs,
    workload_prompts,
)
from pytest_specdec.verdict.stats import (  # noqa: E402
    DEFAULT_POLICY,
    SessionSummary,
    between_session_cv,
    decision_delta,
)


def boots(paths: list[Path]) -> dict[str, list[tuple[dict[str, Any], list[str]]]]:
    """Per config name, each boot's config record and its workload's prompts."""
    out: dict[str, list[tuple[dict[str, Any], list[str]]]] = defaultdict(list)
    for path in paths:
        doc = load_results(path)
        for config in doc["configs"]:
            if not config.get("error"):
                out[config["name"]].append((config, workload_prompts(doc)))
    return out


def report(name: str, found: list[tuple[dict[str, Any], list[str]]], ks: list[int]) -> None:
    print(f"{name}: {len(found)} boot(s)")
    for score in SCORES:
        sessions = [s for config, prompts in found for s in by_session(config, prompts, score)]
        summaries = [SessionSummary.from_values(suite_runs(s)) for s in sessions]
        levels = ", ".join(f"{math.exp(s.mean_log):.1f}" for s in summaries)
        cv = between_session_cv(summaries)
        if cv is None:
            print(f"  {score:6}  suite {levels} tok/s (one boot: no between-boot CV)")
            continue
        per_prompt = [
            between_session_cv([SessionSummary.from_values(s[p]) for s in sessions])
            for p in sessions[0]
        ]
        spread = [c for c in per_prompt if c is not None]
        delta = decision_delta(DEFAULT_POLICY, cv)
        print(
            f"  {score:6}  suite {levels} tok/s; between-boot CV {cv:.2%} "
            f"(per prompt {min(spread):.2%}-{max(spread):.2%}); δ {delta:.1%}"
        )
        for k in ks:
            mdes = ", ".join(f"m={m}: {history_mde(cv, k, m):.1%}" for m in (1, 3))
            print(f"          K={k} stored sessions: MDE {mdes}")
    costs = [c for config, _ in found for c in (config.get("extra") or {}).get("cost") or []]
    if costs:
        minutes = ", ".join(f"{c['total_s'] / 60:.2f}" for c in costs)
        boot = ", ".join(f"{c['start_s']:.0f}" for c in costs)
        print(f"  machine time per boot: {minutes} min (of it to ready: {boot} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results files, one boot each")
    parser.add_argument("--history", default="5,10", help="K values for the MDE (default 5,10)")
    args = parser.parse_args()
    ks = [int(k) for k in args.history.split(",") if k.strip()]
    if any(k < 2 for k in ks):
        parser.error(f"--history {args.history}: every K must be 2 or more")
    for name, found in boots(args.results).items():
        report(name, found, ks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
