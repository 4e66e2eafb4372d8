"""Throughput and acceptance of each selected spec config over the prompt suite, and its verdict.

    pytest suites --spec-config ddtree-b15
    pytest suites --specdec-engine llamacpp --spec-config baseline,draft-d16

Each config boots once; every prompt is measured --specdec-runs times after a warmup pass.
Then the config's suite score (geometric mean over prompts) is judged against its stored
baseline, or against --specdec-reference, twice: output tok/s and accept length. REGRESSED
on either fails (--specdec-fail-on picks), a missing baseline skips. The numbers and both
verdicts are attached to each test as JUnit properties (--junitxml).
"""

from collections.abc import Callable

import pytest

from pytest_specdec.core.configs import SpecConfig
from pytest_specdec.core.workloads import Prompt
from pytest_specdec.driver.runner import Runner, Server, run_errors
from pytest_specdec.plugin import check_judgement
from pytest_specdec.report.export import junit_properties

Record = Callable[[str, object], None]


def test_throughput(
    specdec: Runner, specdec_server: Server, specdec_prompt: Prompt, record_property: Record
) -> None:
    runs = specdec.measure(specdec_server, specdec_prompt)
    for name, value in junit_properties(specdec_server.record, specdec_prompt.id, None):
        record_property(name, value)
    errors = run_errors(runs)
    assert not errors, "\n".join(errors)


def test_verdict(specdec: Runner, specdec_config: SpecConfig, record_property: Record) -> None:
    # After the config's last server session, booted or skipped (decided, or at its budget).
    if specdec_config.name == specdec.settings.reference:
        pytest.skip("the reference config: the others are judged against it")
    check_judgement(specdec, specdec_config.name, record_property)
