"""Lossless check: at temperature 0 each config must emit what the target alone emits.

    pytest suites/test_lossless.py --spec-config draft-d16,ngram

The target is booted once without speculation before the first config, and its greedy output
per prompt is the reference. Token ids are compared where the engine returns them. A
divergence before --specdec-lossless-fail-before (32) fails; a later one is listed as a
warning (batched verification may flip a floating-point near-tie).
"""

import pytest

from pytest_specdec.core.workloads import Prompt
from pytest_specdec.driver.runner import Runner, Server
from pytest_specdec.plugin import check_lossless

pytestmark = pytest.mark.specdec_lossless


def test_lossless(specdec: Runner, specdec_server: Server, specdec_prompt: Prompt) -> None:
    check_lossless(specdec, specdec_server, specdec_prompt)
