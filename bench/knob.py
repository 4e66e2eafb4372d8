"""The acceptance knob of the memory-bound models, measured by the suite itself.

For each perturbation scale it makes a widened SmolLM2 target (scripts/make-memory-bound-
models, small by default so that a CPU runs it), then runs the throughput suite on it with
the real SmolLM2 Q4_1 as the draft, exactly as a user would (``pytest suites/...``), and
prints what the suite measured: accept length and the share of drafted tokens accepted.

    python bench/knob.py                                   # CPU: 0.2B targets, 64 tokens
    python bench/knob.py --scales 0,0.1,0.3 --params 7.4e9 --max-tokens 256 -- \\
        --specdec-suite-file suites/specdec-memory-bound.toml      # on a GPU runner

Arguments after ``--`` go to pytest unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a plain checkout

from pytest_specdec.core.modelfile import cache_root  # noqa: E402
from specdec_lab.models import memory_bound as mbm  # noqa: E402


def measure(
    target: Path, draft: Path, args: argparse.Namespace, extra: list[str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        cmd = [
            sys.executable, "-m", "pytest", "suites/test_throughput.py", "-q",
            "-p", "no:cacheprovider", "--specdec-engine", "llamacpp",
            "--spec-config", args.config, "--specdec-model", str(target),
            "--specdec-draft-model", str(draft), "--specdec-runs", str(args.runs),
            "--specdec-max-tokens", str(args.max_tokens), "--specdec-results", str(out),
            "--specdec-baseline-dir", str(Path(tmp) / "baselines"), *extra,
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if not out.is_file():
            raise SystemExit(f"pytest wrote no results (exit {proc.returncode}):\n{proc.stdout}")
        doc = json.loads(out.read_text())
    runs = [r for c in doc["configs"] for r in c["runs"] if r["phase"] == "measure" and r["ok"]]
    drafted = sum(r.get("draft_tokens") or 0 for r in runs)
    accepted = sum(r.get("accepted_tokens") or 0 for r in runs)
    return {
        "runs": len(runs),
        "accept_length": statistics.fmean(r["accept_length"] for r in runs if r["accept_length"]),
        "accepted_share": accepted / drafted if drafted else None,
        "tok_per_s": statistics.fmean(r["tok_per_s"] for r in runs),
        "exit": proc.returncode,
    }


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", default="0,0.05,0.1,0.2,0.4")
    p.add_argument("--params", type=float, default=0.2e9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", default="draft-d4")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=cache_root() / "models")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    base = cache_root() / "models" / mbm.BASE_NAME
    rows = []
    print(f"{'scale':>6} {'accept len':>10} {'accepted':>9} {'tok/s':>7}  target")
    for scale in (float(s) for s in args.scales.split(",")):
        recipe = mbm.target_recipe(base, args.params, scale, args.seed)
        target, _, _ = mbm.make(base, args.out, recipe, os.cpu_count() or 1)
        row = {"scale": scale, "target": target.name, **measure(target, base, args, extra)}
        rows.append(row)
        share = row["accepted_share"]
        print(f"{scale:>6g} {row['accept_length']:>10.2f} {share:>9.1%} "
              f"{row['tok_per_s']:>7.1f}  {target.name}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
