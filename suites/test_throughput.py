"""Throughput and acceptance of each selected spec config over the prompt suite.

    pytest suites --spec-config ddtree-b15
    pytest suites --specdec-engine llamacpp --spec-config baseline,draft-d16

Each config boots once; every prompt is measured --specdec-runs times after a warmup pass.
"""

from pytest_specdec.runner import Runner, Server, run_errors
from pytest_specdec.workloads import Prompt


def test_throughput(specdec: Runner, specdec_server: Server, specdec_prompt: Prompt) -> None:
    runs = specdec.measure(specdec_server, specdec_prompt)
    errors = run_errors(runs)
    assert not errors, "\n".join(errors)
