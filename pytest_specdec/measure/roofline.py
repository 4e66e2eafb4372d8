"""How far decoding is from the memory-bandwidth limit: the roofline share of each config.

Plain decoding of a large model reads every weight once per token, so it cannot beat
``peak memory bandwidth / weight bytes read per token`` tokens per second. The share is

    decode tok/s x bytes read per token / peak memory bandwidth

with decode tok/s = 1 / TPOT (median over the measured runs: prefill is left out) and the
bytes of the *target* model. For plain decoding it lies below 1 (an engine at 0.8 is near
the limit). A speculative config can pass 1: it verifies several tokens per read of the
weights, which is exactly what it is for.

Peak bandwidth comes from NVML (2 x maximum memory clock x bus width, summed over the GPUs the
engine used) or, where NVML cannot say, from the vendor's datasheet figure for the GPU's name.
On a CPU there is no share (``None`` with the reason). This module imports only
measure/decode.py of the package.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specdec.measure.decode import decode_summary

# Peak memory bandwidth by the name NVML reports, in GB/s, from each product's datasheet.
DATASHEET_GBS: dict[str, float] = {
    "NVIDIA H200": 4800.0,  # H200 SXM datasheet: 4.8 TB/s HBM3e
    "NVIDIA H200 NVL": 4800.0,  # H200 NVL datasheet: 4.8 TB/s
    "NVIDIA H100 80GB HBM3": 3350.0,  # H100 SXM datasheet: 3.35 TB/s
    "NVIDIA H100 PCIe": 2000.0,  # H100 PCIe datasheet: 2 TB/s
    "NVIDIA H100 NVL": 3900.0,  # H100 NVL datasheet: 3.9 TB/s
    "NVIDIA A100-SXM4-80GB": 2039.0,  # A100 80GB SXM datasheet: 2,039 GB/s
    "NVIDIA A100 80GB PCIe": 1935.0,  # A100 80GB PCIe datasheet: 1,935 GB/s
    "NVIDIA A100-SXM4-40GB": 1555.0,  # A100 40GB datasheet: 1,555 GB/s
    "NVIDIA A100-PCIE-40GB": 1555.0,
    "NVIDIA L40S": 864.0,  # L40S datasheet: 864 GB/s
    "NVIDIA L4": 300.0,  # L4 datasheet: 300 GB/s
    "NVIDIA A10G": 600.0,  # A10G (AWS G5): 600 GB/s
    "NVIDIA A10": 600.0,  # A10 datasheet: 600 GB/s
    "NVIDIA GeForce RTX 4090": 1008.0,  # RTX 4090 specifications: 1,008 GB/s
}


@dataclass(frozen=True)
class Bandwidth:
    gb_per_s: float
    source: str


def nvml_bandwidth(device: Mapping[str, Any]) -> float | None:
    """2 x maximum memory clock x bus width (double data rate), in GB/s; None if unknown."""
    clock, bus = device.get("max_memory_clock_mhz"), device.get("memory_bus_width_bits")
    if not clock or not bus:
        return None
    return 2.0 * float(clock) * 1e6 * float(bus) / 8.0 / 1e9


def peak_bandwidth(devices: Sequence[Mapping[str, Any]]) -> Bandwidth | None:
    """Peak memory bandwidth of the GPUs an engine ran on (summed), and where it came from."""
    if not devices:
        return None
    total, sources = 0.0, []
    for dev in devices:
        name = str(dev.get("name"))
        measured = nvml_bandwidth(dev)
        if measured is not None:
            total += measured
            sources.append(
                f"NVML: 2 x {dev['max_memory_clock_mhz']} MHz x {dev['memory_bus_width_bits']} bit"
            )
        elif name in DATASHEET_GBS:
            total += DATASHEET_GBS[name]
            sources.append(f"datasheet figure for {name}")
        else:
            return None
    source = sources[0] if len(set(sources)) == 1 else "; ".join(sources)
    if len(devices) > 1:
        source = f"{len(devices)} GPUs x ({source})"
    return Bandwidth(total, source)


def decode_tok_per_s(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """1 / median TPOT over the measured, successful, valid runs."""
    tpots = [
        float(r["tpot_s"])
        for r in runs
        if r.get("phase") == "measure" and r.get("error") is None and not r.get("invalid")
        and r.get("tpot_s")
    ]  # fmt: skip
    return 1.0 / statistics.median(tpots) if tpots else None


def roofline(config: Mapping[str, Any], gpu: Mapping[str, Any] | None) -> dict[str, Any]:
    """The roofline share of one config record of a results document."""
    devices = (gpu or {}).get("devices") if isinstance(gpu, Mapping) else None
    if not devices:
        return {"share": None, "reason": "no GPU: the bandwidth bound is reported for GPUs"}
    band = peak_bandwidth(devices)
    if band is None:
        names = sorted({str(d.get("name")) for d in devices})
        return {"share": None, "reason": f"peak memory bandwidth of {names} unknown to NVML "
                "and to the datasheet table"}  # fmt: skip
    weights = ((config.get("models") or {}).get("target") or {}).get("weights") or {}
    per_token = weights.get("bytes_per_token")
    if not per_token:
        unknown = "weight bytes of the target unknown (not a local GGUF or safetensors model)"
        return {"share": None, "reason": weights.get("reason") or unknown}
    decode = decode_tok_per_s(config.get("runs") or [])
    if decode is None:
        return {"share": None, "reason": "no measured run with a TPOT"}
    bound = band.gb_per_s * 1e9 / per_token
    return {
        "share": decode / bound,
        "decode_tok_per_s": decode,
        "bound_tok_per_s": bound,
        "bytes_per_token": per_token,
        "achieved_gb_per_s": decode * per_token / 1e9,
        "peak_gb_per_s": band.gb_per_s,
        "peak_source": band.source,
    }


def by_config(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The roofline entry of every config of a results document, by config name."""
    return {c["name"]: roofline(c, results.get("gpu")) for c in results.get("configs", [])}


def annotate(results: dict[str, Any]) -> dict[str, Any]:
    """Set ``roofline`` and the decode score (``decode``, measure/decode.py) on every config
    of a results document (in place); return it."""
    prompts = list((results.get("workload") or {}).get("prompts") or [])
    for config in results.get("configs", []):
        config["roofline"] = roofline(config, results.get("gpu"))
        config["decode"] = decode_summary(config, prompts)
    return results


def describe(entry: Mapping[str, Any] | None) -> str:
    """A table cell: decode tok/s and its share of the bound, e.g. ``221.4 (72%)``."""
    if not entry or entry.get("share") is None:
        return "-"
    return f"{entry['decode_tok_per_s']:.1f} ({entry['share']:.0%})"
