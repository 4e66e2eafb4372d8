"""Wall time of one pytest run over two configs on a CPU host: one process against two
pytest-xdist workers, whose engines each get their own share of the cores.

    python bench/xdist_cpu_split.py             # baseline,ngram, 1 run x 16 tokens, 3 repeats

Prints each repeat's seconds and the median ratio (two workers / one). Without the split,
two llama-servers that each spin a thread per core starve each other on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND = [
    sys.executable, "-m", "pytest", "suites/test_throughput.py", "--specdec-engine", "llamacpp",
    "--spec-config", "baseline,ngram", "--specdec-runs", "1", "--specdec-max-tokens", "16",
    "-p", "no:cacheprovider", "-q",
]  # fmt: skip
XDIST = ["-n", "2", "--dist", "loadgroup", "--max-worker-restart", "0"]


def timed(extra: list[str], out: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [*COMMAND, "--specdec-results", str(out), "--specdec-baseline-dir", str(out.parent),
         *extra],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"pytest {' '.join(extra)} exited {proc.returncode}:\n{proc.stdout[-3000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"# {len(os.sched_getaffinity(0))} cores; {' '.join(COMMAND[3:])}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            one = timed([], Path(tmp) / f"one{i}" / "r.json")
            two = timed(XDIST, Path(tmp) / f"two{i}" / "r.json")
            ratios.append(two / one)
            print(
                f"repeat {i + 1}: one process {one:.1f} s, -n 2 {two:.1f} s, ratio {two / one:.2f}"
            )
    print(f"median ratio (-n 2 / one process): {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
