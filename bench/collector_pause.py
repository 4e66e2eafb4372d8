"""How long a full garbage collection stops a process that holds an engine's imports, and how
long after ``gc.freeze()`` (what SGLang's /freeze_gc does in its processes, and what the load
suite's ``freeze_gc = true`` asks for after the warm-up).

    python bench/collector_pause.py                      # the harness's own interpreter
    python bench/collector_pause.py --python "$SPECDEC_SGLANG_PYTHON" \\
        --module sglang.srt.entrypoints.http_server      # SGLang's HTTP server's imports

Prints the objects the collector tracks after the imports, the median time of three full
collections, and the time of one after freezing. A process that serves requests holds more
(the tokenizer, the requests' state), so these are lower bounds of its pauses.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence

# Runs in the measured interpreter: import what is named (as far as it goes), then collect.
PROBE = r"""
import gc, importlib, json, statistics, sys, time
error = None
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:  # a partial install: what was imported until then is measured
        error = f"{name}: {type(exc).__name__}: {exc}"
def full():
    start = time.perf_counter()
    gc.collect()
    return time.perf_counter() - start
times = [full() for _ in range(3)]
objects = len(gc.get_objects())
gc.freeze()
print(json.dumps({"objects": objects, "full_s": statistics.median(times),
                  "frozen_s": full(), "import_error": error}))
"""

HARNESS = ["pytest", "numpy", "scipy.stats", "httpx", "pytest_specdec.plugin"]


def measure(python: str, modules: Sequence[str]) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", PROBE, *modules], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed: {done.stderr.strip()[-500:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    parser.add_argument(
        "--module", action="append", default=None,
        help=f"a module to import first (repeatable; default: {' '.join(HARNESS)})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    modules = args.module or HARNESS
    found = measure(args.python, modules)
    print(f"{args.python}: imported {', '.join(modules)}")
    if found["import_error"]:
        print(f"  stopped at {found['import_error']} (measured as far as it got)")
    print(f"  objects tracked: {found['objects']}")
    print(f"  full collection: {float(found['full_s']) * 1000:.1f} ms (median of 3)")  # type: ignore[arg-type]
    print(f"  after gc.freeze(): {float(found['frozen_s']) * 1000:.1f} ms")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
