"""The roofline share: the bandwidth bound from NVML or the datasheet, decode tok/s from TPOT,
and the column in the terminal table and the Markdown report; checked against the results
measured on an NVIDIA H200 (docs/gpu-run/h200-memory-bound.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeNvml

from pytest_specdec.gpu.nvml import fingerprint
from pytest_specdec.measure.roofline import (
    annotate,
    by_config,
    decode_tok_per_s,
    describe,
    nvml_bandwidth,
    peak_bandwidth,
    roofline,
)
from pytest_specdec.report.export import markdown_summary, records
from pytest_specdec.report.table import terminal_summary

REPO = Path(__file__).resolve().parent.parent
H200_RUN = REPO / "docs" / "gpu-run" / "h200-memory-bound.json"


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    return json.loads(H200_RUN.read_text())  # type: ignore[no-any-return]


def run(tpot: float | None, phase: str = "measure", **kw: Any) -> dict[str, Any]:
    return {"phase": phase, "error": None, "tpot_s": tpot, **kw}


def config(per_token: int | None, runs: list[dict[str, Any]]) -> dict[str, Any]:
    weights = {"bytes_per_token": per_token} if per_token else {"reason": "not a GGUF"}
    return {"name": "c", "models": {"target": {"weights": weights}}, "runs": runs}


GPU = {"devices": [{"name": "NVIDIA H200", "max_memory_clock_mhz": 3201,
                    "memory_bus_width_bits": 6144}]}  # fmt: skip


def test_nvml_bandwidth_is_double_data_rate_times_bus_width() -> None:
    assert nvml_bandwidth(GPU["devices"][0]) == pytest.approx(4917.0, abs=0.5)
    # What an H200 reported through NVML (6016 bit): 4814 GB/s, 0.3% over its datasheet.
    assert nvml_bandwidth({"max_memory_clock_mhz": 3201, "memory_bus_width_bits": 6016}) == (
        pytest.approx(4814.3, abs=0.1)
    )
    assert nvml_bandwidth({"max_memory_clock_mhz": None, "memory_bus_width_bits": 6016}) is None


def test_fake_nvml_fingerprint_carries_clock_and_bus_width() -> None:
    fp = fingerprint(0, FakeNvml())
    assert (fp.max_memory_clock_mhz, fp.memory_bus_width_bits) == (3201, 6144)
    unsupported = FakeNvml()
    unsupported.gpus[0].unsupported.add("nvmlDeviceGetMemoryBusWidth")
    assert fingerprint(0, unsupported).memory_bus_width_bits is None


def test_datasheet_fallback_sum_over_gpus_and_unknown_cards() -> None:
    one = peak_bandwidth([{"name": "NVIDIA A100-SXM4-80GB"}])
    assert one is not None and one.gb_per_s == 2039.0 and "datasheet" in one.source
    two = peak_bandwidth([GPU["devices"][0], GPU["devices"][0]])
    assert two is not None and two.gb_per_s == pytest.approx(2 * 4917.0, abs=1)
    assert two.source.startswith("2 GPUs")
    assert peak_bandwidth([{"name": "Some Future GPU"}]) is None
    assert peak_bandwidth([]) is None


def test_decode_rate_is_one_over_the_median_tpot_of_measured_valid_runs() -> None:
    runs = [
        run(0.010), run(0.020), run(0.030),
        run(0.001, phase="warmup"), run(0.001, error="boom"), run(0.001, invalid=["thermal"]),
        run(None),
    ]  # fmt: skip
    assert decode_tok_per_s(runs) == pytest.approx(50.0)
    assert decode_tok_per_s([run(None)]) is None


def test_share_and_the_reasons_when_there_is_none() -> None:
    entry = roofline(config(10**10, [run(0.004)]), GPU)
    assert entry["decode_tok_per_s"] == pytest.approx(250.0)
    assert entry["bound_tok_per_s"] == pytest.approx(491.7, abs=0.1)
    assert entry["share"] == pytest.approx(250 / 491.7, abs=1e-3)
    assert entry["achieved_gb_per_s"] == pytest.approx(2500.0)
    assert describe(entry) == "250.0 (51%)"
    assert "no GPU" in roofline(config(10**10, [run(0.004)]), None)["reason"]
    assert roofline(config(None, [run(0.004)]), GPU)["reason"] == "not a GGUF"
    unknown = {"devices": [{"name": "Some Future GPU"}]}
    assert "unknown to NVML" in roofline(config(10**10, [run(0.004)]), unknown)["reason"]
    assert "no measured run" in roofline(config(10**10, []), GPU)["reason"]
    assert describe({"share": None, "reason": "x"}) == "-"


def test_h200_memory_bound_run_recomputes_to_its_recorded_shares(h200: dict[str, Any]) -> None:
    recorded = {c["name"]: c["roofline"] for c in h200["configs"]}
    again = by_config(h200)
    for name, entry in recorded.items():
        assert again[name]["share"] == pytest.approx(entry["share"])
    base = again["baseline"]
    assert base["bytes_per_token"] == 14_814_160_128  # 14.8 GB of F16 weights per step
    assert base["peak_source"] == "NVML: 2 x 3201 MHz x 6016 bit"
    assert 0.3 < base["share"] < 1  # plain decoding stays under the bound
    assert again["draft-d16"]["share"] > 2 * base["share"]  # speculation reaches past it


def test_terminal_and_markdown_tables_gain_the_column_only_with_a_share(
    h200: dict[str, Any],
) -> None:
    recs = {r.name: r for r in records(h200)}
    prompts = h200["workload"]["prompts"]
    lines = terminal_summary(recs, prompts, None, by_config(h200))
    table = lines[1]
    assert "decode (roofline)" in table.splitlines()[0]
    rows = table.splitlines()
    assert any(ln.startswith("baseline") and ln.rstrip().endswith("(37%)") for ln in rows)
    assert any(ln.startswith("roofline (baseline, draft-d4, draft-d16, ngram)") for ln in lines)
    text = markdown_summary(h200)
    assert "decode tok/s (roofline)" in text and "4814 GB/s peak" in text
    cpu = copy.deepcopy(h200)
    cpu["gpu"] = None
    assert "roofline" not in markdown_summary(annotate(cpu))
    cpu_lines = terminal_summary(recs, prompts, None, by_config(cpu))
    assert "decode (roofline)" not in cpu_lines[1]
