"""scripts/sglang_inject: the kernel-side slowdown of SGLang's target verify pass, exercised on
stand-ins of ``sglang.srt.models.llama`` and ``torch.cuda._sleep`` (the real run is on a GPU:
docs/statistics.md). What is checked: the class is patched when SGLang imports it, the spin
follows every TARGET_VERIFY forward and no other, outputs pass through unchanged, and nothing
happens without the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

INJECT = Path(__file__).resolve().parent.parent / "scripts" / "sglang_inject"

FAKE_LLAMA = """
class Mode:
    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"


class Batch:
    def __init__(self, name, batch_size=1):
        self.forward_mode = Mode(name)
        self.batch_size = batch_size


class LlamaForCausalLM:
    def forward(self, input_ids, positions, forward_batch, input_embeds=None):
        return ["out", input_ids, forward_batch.forward_mode.name]
"""

FAKE_TORCH = """
class cuda:
    slept = []

    @staticmethod
    def _sleep(cycles):
        cuda.slept.append(cycles)
"""

PROBE = """
import json
import torch
from sglang.srt.models.llama import Batch, LlamaForCausalLM
model = LlamaForCausalLM()
outs = [model.forward(i, 0, Batch(m)) for i, m in
        enumerate(["DECODE", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "EXTEND", "TARGET_VERIFY"])]
outs.append(model.forward(9, 0, forward_batch=Batch("TARGET_VERIFY")))
for size in (4, 5, 16):
    outs.append(model.forward(size, 0, Batch("TARGET_VERIFY", size)))
wrapped = hasattr(LlamaForCausalLM.forward, "__wrapped__")
print(json.dumps({"outs": outs, "slept": torch.cuda.slept, "wrapped": wrapped}))
"""


@pytest.fixture
def fake_site(tmp_path: Path) -> Path:
    package = tmp_path / "sglang" / "srt" / "models"
    package.mkdir(parents=True)
    for folder in (tmp_path / "sglang", tmp_path / "sglang" / "srt", package):
        (folder / "__init__.py").write_text("")
    (package / "llama.py").write_text(FAKE_LLAMA)
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    return tmp_path


def probe(site: Path, cycles: str | None, **more: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPECDEC_INJECT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(INJECT), str(site)])
    if cycles is not None:
        env["SGLANG_SPECDEC_INJECT_VERIFY_CYCLES"] = cycles
    env.update({f"SGLANG_SPECDEC_INJECT_{k.upper()}": v for k, v in more.items()})
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_every_target_verify_forward_and_only_it_is_followed_by_the_spin(fake_site: Path) -> None:
    done = probe(fake_site, "2600000")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["wrapped"] and found["slept"] == [2600000] * 6
    assert [o[2] for o in found["outs"]] == [
        "DECODE", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "EXTEND", "TARGET_VERIFY", "TARGET_VERIFY",
        "TARGET_VERIFY", "TARGET_VERIFY", "TARGET_VERIFY",
    ]  # fmt: skip
    assert [o[1] for o in found["outs"]] == [0, 1, 2, 3, 4, 9, 4, 5, 16]  # arguments pass


def test_a_slowdown_under_load_spins_only_in_large_batches_per_request(fake_site: Path) -> None:
    done = probe(fake_site, "1000", min_batch="5", per_request="1")
    assert done.returncode == 0, done.stderr
    # batches of 1 (four of them) and 4 spin nothing; 5 and 16 spin 1000 cycles per request
    assert json.loads(done.stdout)["slept"] == [5000, 16000]
    fixed = json.loads(probe(fake_site, "1000", min_batch="5").stdout)
    assert fixed["slept"] == [1000, 1000]


def test_without_the_variable_nothing_is_patched(fake_site: Path) -> None:
    done = probe(fake_site, None)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert not found["wrapped"] and found["slept"] == []


def test_a_bad_value_names_the_variable(fake_site: Path) -> None:
    done = probe(fake_site, "-5")
    assert done.returncode != 0
    assert "SGLANG_SPECDEC_INJECT_VERIFY_CYCLES='-5': give a positive number" in done.stderr


@pytest.mark.parametrize(
    ("more", "message"),
    [({"min_batch": "x"}, "SGLANG_SPECDEC_INJECT_MIN_BATCH='x': give a positive number"),
     ({"per_request": "yes"}, "SGLANG_SPECDEC_INJECT_PER_REQUEST='yes': give 1")],
)  # fmt: skip
def test_bad_load_settings_name_their_variable(
    fake_site: Path, more: dict[str, str], message: str
) -> None:
    done = probe(fake_site, "1000", **more)
    assert done.returncode != 0 and message in done.stderr
