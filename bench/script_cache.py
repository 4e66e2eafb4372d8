"""What the script cache saves per judged config: SGLang's lint (its argument parser imported
in SGLang's interpreter) and the prompts rendered with the model's chat template, each timed
with an empty cache (what every config paid before) and again with the answer kept.

    python bench/script_cache.py                 # SGLang's parser virtualenv of ./scripts/setup
    python bench/script_cache.py --python $SPECDEC_SGLANG_PYTHON --model T.hf --repeat 3

Without --model it lays SmolLM2-135M-Instruct (the set-up cache's GGUF) out in Hugging Face
layout in a temporary folder (specdec_lab/models/hf_layout.py) and renders the seed workload
with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.core.configs import Registry, preset_configs  # noqa: E402
from pytest_specdec.core.modelfile import cache_root  # noqa: E402
from pytest_specdec.core.suitefile import load_suite_settings  # noqa: E402
from pytest_specdec.core.workloads import load_workload  # noqa: E402
from pytest_specdec.engines import make_engine  # noqa: E402
from pytest_specdec.engines.base import BootContext  # noqa: E402
from pytest_specdec.engines.scripts import cache_dir  # noqa: E402

SGLANG_VERSION = "0.5.17"


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=None, help="an interpreter with SGLang")
    parser.add_argument("--model", default=None, help="a model folder in Hugging Face layout")
    parser.add_argument("--config", default="standalone-d16")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each kind (default 3)")
    args = parser.parse_args()
    python = args.python or str(cache_root() / f"sglang-{SGLANG_VERSION}-venv" / "bin" / "python")
    if not Path(python).exists():
        parser.error(f"--python {python} does not exist: run ./scripts/setup or pass --python")
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            from specdec_lab.models import hf_layout

            base = cache_root() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
            model = str(Path(scratch) / "SmolLM2-135M-Instruct.hf")
            hf_layout.convert(base, Path(model))
        suite = load_suite_settings(ROOT / "suites" / "specdec-gpu.toml")
        settings = suite.engine_settings("sglang")
        engine = make_engine("sglang", replace(settings, python=python))
        cfg = Registry(preset_configs()).resolve(args.config, "sglang")
        spec = engine.build_command(BootContext(cfg, model, model, "127.0.0.1", 30000))
        conversations = [[m.to_dict() for m in p.messages] for p in load_workload("seed").prompts]
        jobs = {
            "lint": lambda: engine.lint(spec),  # type: ignore[attr-defined]
            "render": lambda: engine.render(model, conversations),
        }
        for name, job in jobs.items():
            cold: list[float] = []
            warm: list[float] = []
            for _ in range(args.repeat):
                os.environ["SPECDEC_CACHE"] = str(Path(scratch) / f"cache-{name}-{len(cold)}")
                cold.append(timed(job))  # an empty cache: the script runs
                warm.append(timed(job))  # the same inputs: the kept answer
            print(
                f"{name:6}  empty cache {statistics.median(cold):6.2f} s (runs "
                f"{', '.join(f'{t:.2f}' for t in cold)}), kept {statistics.median(warm):5.2f} s "
                f"(runs {', '.join(f'{t:.2f}' for t in warm)})"
            )
            assert list(cache_dir().glob("*.json")), "nothing was kept"
    return 0


if __name__ == "__main__":
    sys.exit(main())
