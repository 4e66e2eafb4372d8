"""Throughput and acceptance of each selected spec config over the prompt suite, and its verdict.

    pytest suites --spec-config ddtree-b15
    pytest suites --specdec-engine llamacpp --spec-config baseline,draft-d16

Each config boots once; every prompt is measured --specdec-runs times after a warmup pass.
Then the config's suite score (geometric mean over prompts) is judged against its stored
baseline, or against --specdec-reference: REGRESSED fails, a missing baseline skips.
"""

from pytest_specdec.plugin import check_judgement
from pytest_specdec.runner import Runner, Server, run_errors
from pytest_specdec.workloads import Prompt


def test_throughput(specdec: Runner, specdec_server: Server, specdec_prompt: Prompt) -> None:
    runs = specdec.measure(specdec_server, specdec_prompt)
    errors = run_errors(runs)
    assert not errors, "\n".join(errors)


def test_verdict(specdec: Runner, specdec_server: Server) -> None:
    if specdec_server.config.name == specdec.options.reference:
        return  # the reference is what the others are judged against
    check_judgement(specdec, specdec_server.config.name)
