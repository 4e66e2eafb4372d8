"""Speculation under load: each config at each load level, judged, and where it stops paying.

    pytest suites/test_concurrency.py --spec-config baseline,draft-d4 --specdec-concurrency 1,4,16
    pytest suites --specdec-suite-file suites/specdec-gpu-load.toml --spec-config standalone-d16

A level is a number of closed-loop clients; each client covers the whole workload once per
round, and each level runs --specdec-rounds rounds (default 5) after a warm-up at that level.
Per level: aggregate output tok/s with its CI, decode tok/s (1 / TPOT) at the median and the
slow 99th percentile, TTFT, accept length from the engine's counters, and what the engine did
(queued requests, batches outside CUDA graphs). Then each level is judged against the config's
baseline (or --specdec-reference), with Holm across levels, and the speedup curve of each
speculative config over the plain config of the run gives the concurrency where speculation
stops paying (its crossover). The engine needs as many parallel slots as the largest level
(llama.cpp -np, SGLang --max-running-requests); a level above them is reported as queued.
"""

from collections.abc import Callable

import pytest

from pytest_specdec.core.configs import SpecConfig
from pytest_specdec.driver.runner import Runner, Server
from pytest_specdec.plugin import check_load

Record = Callable[[str, object], None]
pytestmark = pytest.mark.specdec_load


def test_concurrency(specdec: Runner, specdec_server: Server, specdec_clients: int) -> None:
    level = specdec.load_level(specdec_server, specdec_clients)
    rounds = specdec.level_rounds(specdec_server, specdec_clients)
    errors = [f"round {r.round}: {e}" for r in rounds for e in r.errors]
    assert not errors, "\n".join(errors)
    assert level.output_tok_per_s, f"no output at {specdec_clients} clients"


def test_load_verdict(specdec: Runner, specdec_config: SpecConfig, record_property: Record) -> None:
    # After the config's last server session, booted or skipped (decided, or at its budget).
    if specdec_config.name == specdec.settings.reference:
        pytest.skip("the reference config: the others are judged against it")
    check_load(specdec, specdec_config.name, record_property)
