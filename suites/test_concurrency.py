"""Concurrency sweep: aggregate output tok/s, request throughput, TTFT and TPOT percentiles.

    pytest suites/test_concurrency.py --spec-config baseline,draft-d4 --specdec-concurrency 1,4,16

The engine needs as many parallel slots as the largest level (llama.cpp: -np); the slot
setting is recorded with each level.
"""

from pytest_specdec.driver.runner import Runner, Server


def test_concurrency(specdec: Runner, specdec_server: Server, specdec_clients: int) -> None:
    result = specdec.sweep(specdec_server, specdec_clients)
    assert not result.errors, "\n".join(result.errors)
    assert result.output_tok_per_s, f"no output at {specdec_clients} clients"
