"""Load levels of SGLang 0.5.17 on one NVIDIA H200 judged again from the committed run
(docs/gpu-run.md, "An eighteenth H200"): five boots of `baseline` stored at 16 and 64 clients,
then a night of two boots judged against them. The throughput MDE is within 5% at 16 clients
and not at 64, where the boots followed the host's pace: the load client's CPU time for the
same requests fell by a third over the session, and throughput rose with it."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import load_judged

from pytest_specdec.measure.levels import client_cpu_s, rounds_of

RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-run" / "load-one-machine"
STORED = RUN / "baselines" / "gpu-nvidia-h200-x1" / "sglang"
NIGHT = RUN / "h200-night-load-nightly.json.gz"


def _doc(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def test_the_night_as_the_run_judged_it_flags_no_level() -> None:
    """Two boots against five of the same machine (the adaptive night's alpha, 0.0059 after its
    looks): 16 clients INCONCLUSIVE 1.026x, MDE 3.6%; 64 clients INCONCLUSIVE 1.063x, MDE
    14.8%; the GPU's own work UNCHANGED at both, MDE 3.9% and 4.5%."""
    (verdict,) = _doc(NIGHT)["verdicts"]
    levels = verdict["load"]["levels"]
    for clients, ratio, mde, work_mde in (("16", 1.026, 0.036, 0.039), ("64", 1.063, 0.148, 0.045)):
        level = levels[clients]
        assert level["outcome"] == "INCONCLUSIVE" and not level["verdict"]["provisional"]
        assert (level["verdict"]["n_new"], level["verdict"]["n_ref"]) == (2, 5)
        assert level["verdict"]["ratio"] == pytest.approx(ratio, abs=0.001)
        assert level["verdict"]["mde"] == pytest.approx(mde, abs=0.001)
        assert level["work"]["outcome"] == "UNCHANGED"
        assert level["work"]["mde"] == pytest.approx(work_mde, abs=0.001)


def test_the_host_ran_faster_tonight_and_the_level_says_so() -> None:
    """Judged again with the stored cells' client CPU seconds: at 64 clients the client spent
    0.75x the stored rounds' CPU time on the same requests, at 16 clients 0.80x."""
    judged = load_judged(NIGHT, STORED)["baseline"]
    for clients, ratio in ((16, 0.801), (64, 0.749)):
        level = judged[clients]
        assert level.pace is not None and level.pace["ratio"] == pytest.approx(ratio, abs=0.001)
        assert f"the load client spent {ratio:.2f}x the stored rounds' CPU time" in level.message
        assert ": a faster host" in level.message


def test_the_boots_throughput_at_64_clients_followed_the_hosts_pace() -> None:
    """Seven boots in order (five stored, two judged): the client's CPU seconds a round fell
    from 3.4-3.6 to 2.1-2.6 while throughput rose from 8,342-8,556 to 9,091-9,516 tok/s; over
    the boots the two correlate at r = -0.97, and the GPU's decode seconds did not move."""
    cpu, tok, decode = [], [], []
    for path in (RUN / "h200-k5-load-store.json.gz", NIGHT):
        (config,) = _doc(path)["configs"]
        for session in sorted({r["session"] for r in config["extra"]["load"]}):
            rounds = [r for r in rounds_of(config, 64, session) if r.ok and not r.warmup]
            cpu.append(client_cpu_s(rounds))
            tok.append(math.exp(np.mean([math.log(r.output_tok_per_s) for r in rounds])))
            decode.append(np.mean([r.engine["phase_s"]["decode"] for r in rounds]))
    assert len(cpu) == 7
    assert np.corrcoef(np.log(cpu), np.log(tok))[0, 1] < -0.95
    assert max(cpu[:2]) / min(cpu) > 1.6 and max(tok) / min(tok) > 1.13
    assert max(decode) / min(decode) < 1.03
