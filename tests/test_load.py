"""Load levels without an engine: rounds, level summaries, engine facts, the per-level verdicts,
Holm across levels, the speedup curve's crossover, baseline cells and the suite file's keys."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests_support import FakeSGLang, bench

from pytest_specdec.core.configs import ConfigError, is_speculative
from pytest_specdec.core.results import RunRecord, finalize_timings
from pytest_specdec.core.suitefile import load_suite_settings
from pytest_specdec.core.values import rounds
from pytest_specdec.engines.llamacpp import LlamaCppEngine
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.measure.gauges import GaugeWatch, watch_gauges
from pytest_specdec.measure.levels import (
    LoadLimits,
    client_order,
    gauge_read_summary,
    levels_of,
    observed_notes,
    run_round,
    summarize_level,
    summarize_round,
)
from pytest_specdec.report.export import load_properties
from pytest_specdec.report.load import _engine_cell, verdict_rows
from pytest_specdec.verdict.baselines import BaselineError, _check_document
from pytest_specdec.verdict.crossover import crossover_of, first_fall
from pytest_specdec.verdict.gate import crossover_failures, failing, not_gating
from pytest_specdec.verdict.judge import Judgement, judge_baseline, judge_reference
from pytest_specdec.verdict.load import (
    JUDGED,
    UNJUDGEABLE,
    LevelJudgement,
    LoadJudgement,
    adjust_load,
    judge_load_history,
    judge_load_reference,
    plain_config,
)
from pytest_specdec.verdict.sessions import session_entries
from pytest_specdec.verdict.stats import Outcome, VerdictPolicy, welch_log

POLICY = VerdictPolicy()


# --- rounds -------------------------------------------------------------------------------


def test_each_client_covers_the_workload_from_its_own_prompt() -> None:
    assert client_order(0, 3) == [0, 1, 2]
    assert client_order(4, 3) == [1, 2, 0]
    orders = [client_order(c, 5) for c in range(5)]
    assert all(sorted(o) == list(range(5)) for o in orders)
    assert {o[0] for o in orders} == set(range(5))  # the batch mixes the prompts


def _record(client: int, index: int, tokens: int = 32, error: str | None = None) -> RunRecord:
    rec = RunRecord(config="c", prompt=f"p{index}", run=1, phase="load",
                    extra={"client": client})  # fmt: skip
    if error:
        rec.error = error
        return rec
    rec.output_tokens, rec.wall_s, rec.ttft_s, rec.verify_steps = tokens, 0.5, 0.1, tokens // 4
    return finalize_timings(rec)


def test_a_round_runs_every_client_as_a_closed_loop() -> None:
    active, peak, sent = 0, 0, []

    async def send(client: int, index: int) -> RunRecord:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        sent.append((client, index))
        await asyncio.sleep(0.01)
        active -= 1
        return _record(client, index)

    records, wall = asyncio.run(run_round(3, 2, send))
    assert len(records) == 6 and sorted(sent) == [(c, i) for c in range(3) for i in range(2)]
    assert peak == 3  # one request in flight per client, never more
    assert wall > 0
    with pytest.raises(ValueError, match="clients >= 1"):
        asyncio.run(run_round(0, 2, send))


def test_a_client_stops_at_its_failed_request_and_a_raising_send_cancels_the_others() -> None:
    """A client whose request failed sends nothing more in the round (its throughput is gone,
    and a hung engine would hold it for a timeout a prompt); the others go on. A send that
    raises cancels every other client before the error goes on: none keeps loading the
    engine after the round."""
    sent: list[tuple[int, int]] = []

    async def send(client: int, index: int) -> RunRecord:
        sent.append((client, index))
        await asyncio.sleep(0.01)
        return _record(client, index, error="HTTP 500" if client == 1 else None)

    records, _ = asyncio.run(run_round(3, 4, send))
    assert [(c, i) for c, i in sent if c == 1] == [(1, 1)]  # its first prompt, then no more
    assert len([s for s in sent if s[0] != 1]) == 8 and len(records) == 9

    after: list[int] = []

    async def main() -> None:
        async def raising(client: int, index: int) -> RunRecord:
            if client == 0:
                raise RuntimeError("adapter bug")
            await asyncio.sleep(0.05)
            after.append(client)
            return _record(client, index)

        with pytest.raises(RuntimeError, match="adapter bug"):
            await run_round(3, 4, raising)
        await asyncio.sleep(0.2)  # time for an orphaned client to send again

    asyncio.run(main())
    assert after == []


def test_a_level_takes_its_percentiles_over_every_request_of_its_rounds() -> None:
    """One request stalls in one round of five: the level's TTFT p99 shows it, where the
    median over the rounds' own p99s would not."""
    rounds = []
    for n in range(1, 6):
        records = [_record(c, 0) for c in range(5)]
        if n == 3:
            records[0].ttft_s = 2.0
        rounds.append(summarize_round(5, n, 1, records, 1.0))
    level = summarize_level(rounds)
    assert level.ttft_s["p50"] == pytest.approx(0.1)
    assert level.ttft_s["p99"] is not None and level.ttft_s["p99"] > 1.0
    assert statistics.median(r.ttft_s["p99"] or 0 for r in rounds) == pytest.approx(0.1)
    # rounds stored before they kept their requests: the median over the rounds, as then
    old = summarize_level([replace(r, rows=()) for r in rounds])
    assert old.ttft_s["p99"] == pytest.approx(0.1)


def test_a_round_with_a_failed_request_has_errors_and_no_throughput() -> None:
    records = [_record(0, 0), _record(1, 0, error="request timed out after 300 s")]
    result = summarize_round(2, 1, 1, records, 1.0)
    assert result.output_tok_per_s is None and not result.ok
    assert result.failed == 1 and result.errors == ("client 1 p0: request timed out after 300 s",)
    clean = summarize_round(2, 1, 1, [_record(0, 0), _record(1, 0)], 2.0)
    assert clean.output_tok_per_s == pytest.approx(32.0) and clean.ok
    # accept length from the requests when the engine keeps no counters, from counters first
    assert clean.accept_length == pytest.approx(4.0) and clean.accept_source == "requests"
    counted = summarize_round(2, 1, 1, [_record(0, 0)], 1.0, {"accept_length": 3.5,
                                                               "verify_steps": 9.0})  # fmt: skip
    assert counted.accept_length == 3.5 and counted.accept_source == "metrics-delta"
    assert clean.decode_tok_per_s["p50"] == pytest.approx(1 / clean.tpot_s["p50"])  # type: ignore[operator]


def test_a_level_summary_leaves_failed_and_invalid_rounds_out() -> None:
    good = [summarize_round(2, n, 1, [_record(0, 0, 30 + n), _record(1, 0)], 1.0)
            for n in range(1, 4)]  # fmt: skip
    bad = summarize_round(2, 4, 1, [_record(0, 0, error="boom")], 1.0)
    throttled = replace(good[0], round=5, invalid=("HW thermal slowdown",))
    level = summarize_level([*good, bad, throttled])
    assert level.rounds == 3 and level.failed_rounds == 2
    expected = math.exp(np.mean([math.log(63), math.log(64), math.log(65)]))
    assert level.output_tok_per_s == pytest.approx(expected)
    assert level.ci_half is not None and level.ci_half > 0


def test_a_level_names_its_prefills_outside_graphs() -> None:
    """The eager prefills of a level's rounds are summed and named in its notes and its engine
    cell, with the largest; a level with none says nothing of them."""
    rounds = [
        replace(summarize_round(4, n, 1, [_record(0, 0), _record(1, 0)], 1.0),
                engine={"prefill_batches": 20, "prefill_outside_graphs": 9 + n,
                        "prefill_outside_max_tokens": n})
        for n in (1, 2)
    ]  # fmt: skip
    level = summarize_level(rounds)
    assert (level.prefill_batches, level.prefill_outside_graphs) == (40, 21)
    assert level.prefill_outside_max_tokens == 2
    assert observed_notes(level) == [
        "prefill outside CUDA graphs: 21 of 40 prefill batches, of 2 new tokens at most "
        "(the engine's log)"
    ]
    assert _engine_cell(level, LoadLimits()) == "eager prefill 21/40"
    clean = summarize_level([replace(r, engine={"prefill_batches": 20}) for r in rounds])
    assert observed_notes(clean) == [] and _engine_cell(clean, LoadLimits()) == "-"
    off = LoadLimits(prefill_graphs_off="--disable-prefill-cuda-graph")
    assert _engine_cell(clean, off) == "eager prefill"


def test_load_limits_name_queueing_and_graphs() -> None:
    sglang = SGLangEngine()
    argv = ["python", "-m", "sglang.launch_server", "--max-running-requests", "32",
            "--cuda-graph-max-bs-decode", "16"]  # fmt: skip
    limits = sglang.load_limits(argv)
    assert (limits.slots, limits.graph_max_batch) == (32, 16)
    assert limits.notes(8) == []
    assert limits.notes(64)[0].startswith("queued by its settings: 64 clients, 32 requests")
    assert "outside CUDA graphs above batch 16 (--cuda-graph-max-bs-decode 16)" in limits.notes(32)
    off = sglang.load_limits([*argv, "--disable-cuda-graph"])
    assert off.graph_max_batch == 0 and "they are off" in off.notes(1)[0]
    assert off.notes(1)[-1] == "prefill outside CUDA graphs: they are off (--disable-cuda-graph)"
    eager = sglang.load_limits([*argv, "--disable-prefill-cuda-graph"])
    assert (eager.graph_max_batch, eager.prefill_graphs_off) == (16, "--disable-prefill-cuda-graph")
    fork = sglang.load_limits([*argv, "--disable-piecewise-cuda-graph"])
    assert fork.prefill_graphs_off == "--disable-piecewise-cuda-graph"
    assert sglang.load_limits(["python", "--cuda-graph-max-bs=8"]).graph_max_batch == 8
    llama = LlamaCppEngine().load_limits(["llama-server", "-np", "4", "-c", "8192"])
    assert llama == LoadLimits(slots=4, slots_flag="-np")
    assert LlamaCppEngine().load_limits(["llama-server"]).notes(64) == []  # the default: unknown


SGLANG_LOG = """\
[2026-12-03 10:00:01] Prefill batch, #new-seq: 8, #new-token: 400, #cached-token: 0, \
token usage: 0.00, #running-req: 0, #queue-req: 0, cuda graph: False, input throughput \
(token/s): 1000.00
[2026-12-03 21:11:18] Prefill batch, #new-seq: 1, #new-token: 148, #cached-token: 0, token \
usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input \
throughput (token/s): 97.81, fwd occupancy: nan%
[2026-12-03 21:11:20] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 147, token \
usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input \
throughput (token/s): 1.44, fwd occupancy: nan%
[2026-12-03 21:11:21] Prefill batch, #new-seq: 3, #new-token: 3, #cached-token: 410
[2026-12-03 10:00:02] Decode batch, #running-req: 8, #token: 1100, token usage: 0.01, \
accept len: 8.62, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 1433.21, \
#queue-req: 0
[2026-12-03 10:00:03] Decode batch, #running-req: 64, #token: 9100, token usage: 0.05, \
cuda graph: False, gen throughput (token/s): 3662.50, #queue-req: 3
"""


def test_sglang_log_facts_read_its_decode_lines() -> None:
    """Decode lines (every --decode-log-interval steps) and prefill lines (every batch), as
    SGLang 0.5.17 wrote them on an H200; a prefill line without the graph field (an older
    build) counts as a batch and never as one outside graphs."""
    facts = SGLangEngine().log_facts(SGLANG_LOG)
    assert facts == {"decode_lines": 2, "outside_graphs": 1, "log_max_running": 64,
                     "log_max_queued": 3, "log_gen_tok_per_s": 3662.5,
                     "prefill_batches": 4, "prefill_outside_graphs": 2,
                     "prefill_outside_max_tokens": 400}  # fmt: skip
    prefill_only = SGLangEngine().log_facts(SGLANG_LOG.split("[2026-12-03 10:00:02]")[0])
    assert prefill_only == {"prefill_batches": 4, "prefill_outside_graphs": 2,
                            "prefill_outside_max_tokens": 400}  # fmt: skip
    assert SGLangEngine().log_facts("nothing here") == {}
    assert SGLangEngine().load_gauges({'sglang:num_queue_reqs{model_name="m"}': 2.0}) == {
        "running": None, "queued": 2.0}  # fmt: skip


# --- crossover --------------------------------------------------------------------------------


def test_first_fall_interpolates_in_log_clients() -> None:
    xs = [1.0, 4.0, 16.0, 64.0]
    where, at = first_fall(xs, [math.log(1.4), math.log(1.2), math.log(0.9), math.log(0.8)])
    assert where == "at" and at is not None
    t = math.log(1.2) / (math.log(1.2) - math.log(0.9))
    assert at == pytest.approx(math.exp(math.log(4) + t * (math.log(16) - math.log(4))))
    assert first_fall(xs, [0.1, 0.2, 0.1, 0.05]) == ("above", None)
    assert first_fall(xs, [-0.1, -0.2, -0.1, 0.0]) == ("below", None)  # no level above 1
    # a curve even or under 1 at its first level that pays further up is not "below": its
    # fall is looked for after the first level above 1
    assert first_fall(xs, [-0.1, 0.2, 0.1, 0.05]) == ("above", None)
    where, at = first_fall(xs, [-0.005, 0.2, 0.1, -0.1])
    assert where == "at" and at is not None and 16 < at < 64
    assert first_fall(xs, [-0.005, 0.2, 0.1, -0.1], from_start=True) == ("below", None)
    with pytest.raises(ValueError, match="as many levels"):
        first_fall(xs, [0.1])


def test_the_crossover_headline_follows_the_levels_states() -> None:
    """A noisy first level (0.995x, CI holding 1) no longer hides the curve; a curve whose
    levels are all above 1 with CIs holding 1 is "above 1", not "pays"."""
    hidden = crossover_of("b", [_level(1, 0.995, 0.05), _level(4, 1.3), _level(16, 1.2),
                                _level(64, 0.8)])  # fmt: skip
    assert hidden is not None and hidden.where == "at"
    assert hidden.text.startswith("stops paying at about ")
    even = crossover_of("b", [_level(c, 1.02, 0.03) for c in (1, 4)])
    assert (
        even is not None and even.where == "above" and all(p.state == "even" for p in even.points)
    )
    assert even.text.startswith("above 1 at every level measured (1 to 4 clients)")
    paying = crossover_of("b", [_level(c, 1.3) for c in (1, 4)])
    assert paying is not None and paying.text.startswith("pays at every level measured")
    later = crossover_of("b", [_level(1, 0.97), _level(4, 1.3), _level(16, 1.2)])
    assert later is not None and later.text.startswith(
        "above 1 from 4 clients to the last level measured (16)"
    )


def _level(clients: int, ratio: float, half: float = 0.02) -> LevelJudgement:
    rng = np.random.default_rng(clients)
    new = np.exp(math.log(100 * ratio) + rng.normal(0, half, 5))
    ref = np.exp(math.log(100.0) + rng.normal(0, half, 5))
    return LevelJudgement(clients, welch_log(new.tolist(), ref.tolist(), POLICY), "")


def test_the_crossover_and_its_band_come_from_the_levels_cis() -> None:
    found = crossover_of("baseline", [_level(c, r) for c, r in
                                      ((1, 1.40), (4, 1.20), (16, 0.90), (64, 0.80))])  # fmt: skip
    assert found is not None and found.where == "at"
    assert found.estimate is not None and 4 < found.estimate < 16
    low, high = found.low[1], found.high[1]
    assert low is not None and high is not None and low <= found.estimate <= high
    assert [p.state for p in found.points] == ["pays", "pays", "loses", "loses"]
    assert found.text.startswith("stops paying at about ")
    assert "against baseline: pays at 1, 4; loses at 16, 64" in found.text
    always = crossover_of("baseline", [_level(1, 1.5), _level(8, 1.3)])
    assert always is not None and always.where == "above"
    assert always.text.startswith("pays at every level measured (1 to 8 clients)")
    never = crossover_of("baseline", [_level(1, 0.7), _level(8, 0.6)])
    assert never is not None and never.text.startswith("does not pay at any level measured")
    bumpy = crossover_of("b", [_level(1, 1.3), _level(4, 0.8), _level(16, 1.3)])
    assert bumpy is not None and bumpy.text.endswith("pays again at 16")
    assert crossover_of("b", []) is None


# --- verdicts per level -----------------------------------------------------------------------


def _rounds(clients: int, values: list[float], session: int = 1,
            accept: float | None = None) -> list[dict[str, Any]]:  # fmt: skip
    out = []
    for n, v in enumerate(values, 1):
        r = summarize_round(clients, n, session, [_record(0, 0)], 1.0).to_dict()
        r.update(output_tok_per_s=v, accept_length=accept)
        out.append(r)
    return out


def _config(name: str, levels: dict[int, list[float]], session: int = 1, accept: float | None = 4.0,
            args: tuple[str, ...] = ("--spec-type", "draft-simple")) -> dict[str, Any]:  # fmt: skip
    load = [r for c, v in levels.items() for r in _rounds(c, v, session, accept)]
    return {"name": name, "engine": "llamacpp", "config": {"name": name, "args": list(args)},
            "runs": [], "extra": {"load": load}, "models": {}}  # fmt: skip


def _noisy(seed: int, level: float, n: int = 5, cv: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return np.exp(math.log(level) + rng.normal(0, cv, n)).tolist()  # type: ignore[no-any-return]


def _results(*configs: dict[str, Any], reference: str | None = None) -> dict[str, Any]:
    return {
        "schema": 1, "started_at": "2026-12-03T00:00:00+00:00",
        "options": {"reference": reference, "max_tokens": 16},
        "workload": {"prompts": ["p0"], "sha256": "w"},
        "host": {"cpu_model": "cpu", "cpu_count": 2}, "gpu": None, "configs": list(configs),
    }  # fmt: skip


def _baseline_of(config: dict[str, Any], tmp_path: Path, sessions: int = 6) -> Any:
    """A stored baseline of ``sessions`` sessions like ``config`` (drawn with other seeds)."""
    from pytest_specdec.verdict.baselines import Baseline, key_for

    doc = _results(config)
    entries = []
    for s in range(sessions):
        levels = {c: _noisy(100 + 10 * s + c, 100.0 * (1 + c / 100)) for c in levels_of(config)}
        entries += session_entries(_results(_config(config["name"], levels)), _config(
            config["name"], levels))  # fmt: skip
        entries[-1]["id"] = f"s{s}"
    return Baseline(tmp_path / "b.json", key_for(doc, config), entries)


def test_a_slowdown_under_load_only_is_regressed_where_it_hits(tmp_path: Path) -> None:
    clean = _config("spec", {c: _noisy(c, 100.0 * (1 + c / 100)) for c in (1, 4, 16, 64)})
    baseline = _baseline_of(clean, tmp_path)
    hit = {c: _noisy(c + 7, 100.0 * (1 + c / 100) * (0.9 if c > 4 else 1.0))
           for c in (1, 4, 16, 64)}  # fmt: skip
    judged = judge_load_history(_config("spec", hit), baseline, POLICY)
    adjust_load([judged], POLICY)
    outcomes = {c: lv.verdict.outcome for c, lv in judged.levels.items() if lv.verdict}
    assert outcomes[16] == outcomes[64] == Outcome.REGRESSED
    assert outcomes[1] == Outcome.UNCHANGED
    assert all(lv.verdict and lv.verdict.method == "prediction-interval"
               for lv in judged.levels.values())  # fmt: skip
    assert judged.levels[16].cause == "kernel" and "accept length unchanged" in str(
        judged.levels[16].cause_text)  # fmt: skip
    assert judged.outcomes().startswith("UNCHANGED at 1")
    assert "REGRESSED at 16, 64" in judged.message


def test_a_rerun_with_nothing_changed_is_flagged_at_no_level(tmp_path: Path) -> None:
    clean = _config("spec", {c: _noisy(c, 100.0 * (1 + c / 100)) for c in (1, 4, 16, 64)})
    baseline = _baseline_of(clean, tmp_path)
    judged = judge_load_history(clean, baseline, POLICY)
    adjust_load([judged], POLICY)
    assert {lv.verdict.outcome for lv in judged.levels.values() if lv.verdict} <= {
        Outcome.UNCHANGED, Outcome.INCONCLUSIVE}  # fmt: skip
    assert all(lv.verdict and lv.verdict.mde <= 0.05 for lv in judged.levels.values())
    assert not any("not measured tonight" in n for n in judged.notes)
    # a night that measures fewer levels than the baseline holds says which it left out
    fewer = _config("spec", {c: _noisy(c, 100.0 * (1 + c / 100)) for c in (1, 4)})
    partial = judge_load_history(fewer, baseline, POLICY)
    assert set(partial.levels) == {1, 4}
    assert "not measured tonight, though the baseline holds them: 16, 64 clients" in partial.notes


def _timed(config: dict[str, Any], phases: dict[int, dict[str, float]]) -> dict[str, Any]:
    """``config`` with each level's rounds timed by phase (SGLang's device timer)."""
    for r in config["extra"]["load"]:
        r["engine"] = {"phase_s": phases[r["clients"]]}
    return config


def test_a_level_verdict_names_the_phase_where_the_gpu_time_went(tmp_path: Path) -> None:
    """Stored sessions keep each level's GPU seconds per round by phase; a level judged
    against them lists each phase's change, the one whose seconds moved most first (here a
    prefill that took 2.4 times as long before a 1 ms phase that tripled, the decode phase as
    before)."""
    even = {c: {"extend": 0.4, "target_verify": 0.8, "tiny": 0.001} for c in (1, 16)}
    stored = _timed(_config("spec", {c: _noisy(c, 100.0 * (1 + c / 100)) for c in (1, 16)}),
                    even)  # fmt: skip
    baseline = _baseline_of(stored, tmp_path, sessions=0)
    for s in range(6):
        levels = {c: _noisy(200 + 10 * s + c, 100.0 * (1 + c / 100)) for c in (1, 16)}
        entry = session_entries(_results(stored), _timed(_config("spec", levels), even))[0]
        assert entry["levels"]["16"]["phase_s"] == even[16]  # stored with the level
        baseline.sessions.append({**entry, "id": f"s{s}"})
    slow = {1: even[1], 16: {"extend": 0.96, "target_verify": 0.8, "tiny": 0.003}}
    tonight = _timed(_config("spec", {1: _noisy(9, 101.0), 16: _noisy(8, 116.0 * 0.85)}), slow)
    judged = judge_load_history(tonight, baseline, POLICY)
    level = judged.levels[16]
    assert level.phases["extend"] == pytest.approx(
        {"new": 0.96, "reference": 0.4, "change": 1.4})  # fmt: skip
    assert level.phases["target_verify"]["change"] == pytest.approx(0.0)
    assert "GPU time per round by phase: extend +140.0% (0.400 -> 0.960 s), tiny +200.0% " \
        "(0.001 -> 0.003 s), target_verify +0.0% (0.800 -> 0.800 s)" in level.message  # fmt: skip
    assert judged.to_dict()["levels"]["16"]["phases"]["extend"]["new"] == 0.96
    untimed = judge_load_history(_config("spec", {16: _noisy(8, 116.0)}), baseline, POLICY)
    assert untimed.levels[16].phases == {} and "by phase" not in untimed.levels[16].message


def test_a_slower_level_is_put_on_the_host_when_the_gpus_own_work_stayed(tmp_path: Path) -> None:
    """A level 10% slower with the same acceptance: where the GPU's own work per round grew
    with it (target_verify), the kernels; where every phase but the prefill (whose device time
    includes preparing the batch on the host) stayed, the host. Rounds of 1 s hold 100 tok."""
    even = {16: {"extend": 0.10, "target_verify": 0.60, "eagle_draft": 0.20}}
    stored = _timed(_config("spec", {16: _noisy(16, 100.0)}), even)
    baseline = _baseline_of(stored, tmp_path, sessions=0)
    for s in range(6):
        entry = session_entries(_results(stored), _timed(_config(
            "spec", {16: _noisy(300 + s, 100.0)}), even))[0]  # fmt: skip
        baseline.sessions.append({**entry, "id": f"s{s}"})

    def tonight(phases: dict[str, float]) -> Any:
        config = _timed(_config("spec", {16: _noisy(9, 90.0)}), {16: phases})
        for r in config["extra"]["load"]:
            r["wall_s"] = 100.0 / r["output_tok_per_s"]
        judged = judge_load_history(config, baseline, POLICY)
        return judged.levels[16]

    kernel = tonight({"extend": 0.10, "target_verify": 0.71, "eagle_draft": 0.20})
    assert kernel.verdict and kernel.verdict.outcome == Outcome.REGRESSED
    assert kernel.cause == "kernel" and "got slower: not the drafter" in str(kernel.cause_text)
    assert "the GPU's own work per round (every phase but extend) moved +0.110 s of the " \
        "round's +0.1" in str(kernel.cause_text)  # fmt: skip
    host = tonight({"extend": 0.18, "target_verify": 0.60, "eagle_draft": 0.201})
    assert host.verdict and host.verdict.outcome == Outcome.REGRESSED and host.cause == "host"
    assert str(host.cause_text).startswith(
        "cause: host side: accept length +0.0%, verify steps/s -9.7%; ")  # fmt: skip
    assert "moved +0.001 s of the round's +0.1" in str(host.cause_text)
    assert "the host's pace, not the kernels" in host.message
    untimed = judge_load_history(_config("spec", {16: _noisy(9, 90.0)}), baseline, POLICY)
    assert untimed.levels[16].cause == "kernel"  # no phase timed tonight: the accept length's
    # GPU work in a phase the stored rounds never timed counts as new work (0 s before them),
    # not as the host's: the kernels, as the level's GPU-work verdict says
    added = tonight({"extend": 0.10, "target_verify": 0.60, "eagle_draft": 0.20,
                     "draft_extend": 0.11})  # fmt: skip
    assert added.cause == "kernel" and "moved +0.110 s of the round's +0.1" in str(added.cause_text)
    assert "draft_extend new (0.000 -> 0.110 s)" in added.message
    assert added.work is not None and added.work.ratio == pytest.approx(0.8 / 0.91)  # its rate


def test_a_gpu_work_verdict_on_a_short_history_says_it_is_provisional_in_its_text() -> None:
    """Three stored sessions (fewer than a final verdict's five): the GPU-work verdict is
    provisional, and its explanation, which the gate reports as it stands, says so."""
    from pytest_specdec.measure.levels import rounds_of
    from pytest_specdec.verdict.work import work_verdict

    timed = _timed(_config("spec", {16: [100.0] * 3}), {16: {"target_verify": 0.8}})
    rounds = rounds_of(timed, 16)
    cells = [{"phase_s": {"target_verify": w}} for w in (0.60, 0.61, 0.59)]
    verdict = work_verdict(rounds, cells, POLICY)
    assert verdict is not None and verdict.provisional and verdict.outcome == Outcome.REGRESSED
    assert verdict.explanation.startswith("REGRESSED (provisional): ")


def test_the_gpus_own_work_is_judged_at_each_level_with_the_sessions_as_the_unit(
    tmp_path: Path,
) -> None:
    """Each level's GPU work per round (every timed phase but extend) against the stored
    sessions' means, a prediction interval from two sessions on: 11% more verify time is
    REGRESSED on it although throughput hardly moved (the host hid it), a slower host with the
    same work is UNCHANGED on it, and it is a family of its own under Holm."""
    rng = np.random.default_rng(5)

    def phases(verify: float) -> dict[int, dict[str, float]]:
        jitter = float(np.exp(rng.normal(0, 0.001)))
        return {c: {"extend": 0.1, "target_verify": verify * jitter, "eagle_draft": 0.2}
                for c in (1, 16)}  # fmt: skip

    stored = _timed(_config("spec", {c: _noisy(c, 100.0) for c in (1, 16)}), phases(0.6))
    baseline = _baseline_of(stored, tmp_path, sessions=0)
    for s in range(3):
        config = _timed(_config("spec", {c: _noisy(400 + s + c, 100.0) for c in (1, 16)}),
                        phases(0.6))  # fmt: skip
        baseline.sessions.append({**session_entries(_results(stored), config)[0], "id": f"s{s}"})
    slow = _timed(_config("spec", {c: _noisy(9 + c, 99.0) for c in (1, 16)}), phases(0.6))
    for r in slow["extra"]["load"]:
        if r["clients"] == 16:
            r["engine"]["phase_s"] = {**r["engine"]["phase_s"], "target_verify": 0.6 * 1.11}
    judged = judge_load_history(slow, baseline, POLICY)
    adjust_load([judged], POLICY)
    work16, work1 = judged.levels[16].work, judged.levels[1].work
    assert work16 is not None and work16.outcome == Outcome.REGRESSED
    assert work16.ratio == pytest.approx(0.8 / (0.6 * 1.11 + 0.2), rel=0.01)
    assert work16.method == "prediction-interval" and work16.n_ref == 3 and work16.provisional
    assert work16.p_adjusted is not None and work16 in judged.verdicts()
    assert work1 is not None and work1.outcome == Outcome.UNCHANGED and work1.mde < 0.01
    assert "the GPU's own work: REGRESSED (provisional) 0.92" in judged.levels[16].message
    doc = {"config": "spec", "load": judged.to_dict()}
    assert verdict_rows(doc)[1][-1].startswith("REGRESSED (provisional) 0.92")
    assert judged.to_dict()["levels"]["16"]["work"]["outcome"] == "REGRESSED"
    whole = Judgement("spec", "judged", "", "baseline", load=judged)
    props = dict(load_properties(whole))  # the JUnit properties of the level verdict test
    assert props["specdec_load_c16_work_verdict"] == "REGRESSED"
    assert props["specdec_load_c1_work_verdict"] == "UNCHANGED"
    found = [message for _, message in failing(whole, ["regressed"])]
    assert any("spec at 16 clients: the GPU's own work per round: REGRESSED" in m for m in found)
    one = _baseline_of(stored, tmp_path, sessions=0)
    one.sessions.append(baseline.sessions[0])  # one stored session: no spread to judge by
    assert judge_load_history(slow, one, POLICY).levels[16].work is None
    untimed = judge_load_history(_config("spec", {16: _noisy(9, 99.0)}), baseline, POLICY)
    assert untimed.levels[16].work is None and "GPU work" not in untimed.levels[16].message


def test_failed_rounds_make_the_load_unjudgeable_and_refuse_the_baseline() -> None:
    config = _config("spec", {4: [100.0, 101.0]})
    config["extra"]["load"][1].update(output_tok_per_s=None, failed=1, errors=["client 0: boom"])
    judged = judge_load_history(config, _baseline_of(_config("spec", {4: [1.0]}), Path("/tmp")),
                                POLICY)  # fmt: skip
    assert judged.status == UNJUDGEABLE
    assert "1 of 1 requests failed: client 0: boom" in judged.message
    with pytest.raises(BaselineError, match="1 failed load round"):
        session_entries(_results(config), config)


def test_ab_per_level_gives_the_speedup_curve_and_its_crossover() -> None:
    plain = _config("baseline", {c: _noisy(c, 100.0 * c**0.9) for c in (1, 4, 16)}, args=(),
                    accept=None)  # fmt: skip
    spec = _config("spec", {1: _noisy(11, 140.0), 4: _noisy(12, 100.0 * 4**0.9 * 1.1),
                            16: _noisy(13, 100.0 * 16**0.9 * 0.8)})  # fmt: skip
    judged = judge_load_reference(spec, plain, POLICY)
    assert judged.status == JUDGED and judged.crossover is not None
    assert judged.crossover.where == "at" and 4 < (judged.crossover.estimate or 0) < 16
    assert judged.levels[1].cause == "speculation"
    assert "one server session per side" in judged.notes[0]
    doc = _results(plain, spec)
    assert plain_config(doc, spec) is plain and plain_config(doc, plain) is None
    unmeasured = {**plain, "extra": {}}  # the reference measured no level: it says so
    judged = judge_load_reference(spec, unmeasured, POLICY)
    assert judged.message == "the reference baseline measured no load level to judge against"


def test_a_speculative_reference_gives_a_comparison_curve_told_as_such() -> None:
    """A tree against a chain: the same curve and crossover, told as where the config stops
    being the faster one, never as where speculation stops paying; its lost-crossover line
    says so too. A plain config against a speculative reference draws no curve."""
    chain = _config("chain", {c: _noisy(c, 100.0 * c**0.9) for c in (1, 4, 16)},
                    args=("--speculative-algorithm", "DFLASH"))  # fmt: skip
    tree_args = ("--speculative-algorithm", "DFLASH", "--speculative-dflash-enable-ddtree")
    tree = _config("tree", {1: _noisy(11, 120.0), 4: _noisy(12, 100.0 * 4**0.9 * 1.04),
                            16: _noisy(13, 100.0 * 16**0.9 * 0.85)}, args=tree_args)  # fmt: skip
    judged = judge_load_reference(tree, chain, POLICY)
    found = judged.crossover
    assert found is not None and found.kind == "comparison" and found.where == "at"
    assert found.text.startswith("stops being faster at about ")
    assert "against chain: faster at 1" in found.text and "paying" not in found.text
    assert found.to_dict()["kind"] == "comparison"
    stored = crossover_of("chain", [_level(1, 1.3), _level(16, 1.2)], "comparison")
    tonight = crossover_of("chain", [_level(1, 1.3), _level(16, 0.85)], "comparison")
    lost = LoadJudgement(JUDGED, "", "x", crossover=tonight, baseline_crossover=stored)
    (line,) = lost.paying_lost()
    assert line.startswith("no longer faster than chain at 16 clients: 0.8")
    assert "where the baseline was faster, 1.2" in line and "paid" not in line
    never = crossover_of("chain", [_level(1, 0.7), _level(8, 0.6)], "comparison")
    assert never is not None and never.text.startswith("is not faster at any level measured")
    plain = _config("plain", {c: _noisy(c, 90.0 * c**0.9) for c in (1, 4, 16)}, args=(),
                    accept=None)  # fmt: skip
    assert judge_load_reference(plain, chain, POLICY).crossover is None
    with pytest.raises(ValueError, match="crossover kind 'other'"):
        crossover_of("chain", [_level(1, 1.3)], "other")
    with pytest.raises(ValueError, match="crossover kind 'other'"):
        replace(found, kind="other")


def test_a_level_stopped_early_is_judged_against_the_plain_sessions_beside_its_own() -> None:
    """``spec`` stopped after one session while the plain config ran a second, 20% slower at
    every level: the A/B and the speedup curve keep the plain session of ``spec``'s round."""
    plain = _config("baseline", {c: _noisy(c, 100.0 * c) for c in (1, 16)}, args=(), accept=None)
    later = _config("baseline", {c: _noisy(c + 7, 80.0 * c) for c in (1, 16)}, session=2)
    plain["extra"]["load"] += later["extra"]["load"]
    spec = _config("spec", {1: _noisy(11, 130.0), 16: _noisy(13, 1600.0 * 0.9)})
    doc = _results(plain, spec, reference="baseline")
    judged = judge_reference(doc, spec, plain, POLICY)
    assert judged.load is not None
    ratios = {c: lv.verdict.ratio for c, lv in judged.load.levels.items() if lv.verdict}
    assert ratios[1] == pytest.approx(1.3, rel=0.02) and ratios[16] == pytest.approx(0.9, rel=0.02)
    assert any("sessions 1-1, booted beside its own" in n for n in judged.notes)
    # judged against a stored baseline, the run's speedup curve keeps the same plain session
    alone = _results(plain, spec)
    load = judge_baseline(alone, spec, Path("/nonexistent-baselines"), POLICY).load
    assert load is not None and load.crossover is not None
    assert any(
        n.startswith("speedup curve judged against baseline's sessions 1-1") for n in load.notes
    )


def test_holm_runs_across_every_level_of_the_run() -> None:
    judgements = [LoadJudgement(JUDGED, "", "x", {c: _level(c, 1.02, 0.03)}) for c in (1, 4, 16)]
    raw = [j.levels[c].verdict.p_improve for j, c in zip(judgements, (1, 4, 16), strict=True)]  # type: ignore[union-attr]
    adjust_load(judgements, POLICY)
    adjusted = [j.levels[c].verdict.p_adjusted for j, c in zip(judgements, (1, 4, 16),
                                                                 strict=True)]  # type: ignore[union-attr]  # fmt: skip
    assert all(a is not None and a >= r for a, r in zip(adjusted, raw, strict=True))
    assert min(a for a in adjusted if a is not None) == pytest.approx(min(1.0, 3 * min(raw)))


def test_the_lost_crossover_gate_needs_a_decided_loss_where_the_baseline_paid() -> None:
    tonight = crossover_of("b", [_level(1, 1.3), _level(16, 0.85)])
    stored = crossover_of("b", [_level(1, 1.3), _level(16, 1.2)])
    judged = LoadJudgement(JUDGED, "", "x", crossover=tonight, baseline_crossover=stored)
    (line,) = judged.paying_lost()
    assert line.startswith("speculation no longer pays at 16 clients: 0.8")
    judged.crossover = crossover_of("b", [_level(1, 1.3), _level(16, 1.0, 0.05)])
    assert judged.paying_lost() == []  # undecided tonight: reported, never failed


def test_a_lost_crossover_on_one_session_a_side_gates_only_where_provisional_verdicts_do() -> None:
    """Tonight's curve from one session a side (pooled rounds, provisional) loses at 16 clients
    where the baseline paid: with --specdec-provisional report it is reported, not failed, as
    the provisional level verdicts of the same rounds are."""
    loses = _level(16, 0.85)
    assert loses.verdict is not None
    one_side = replace(loses, verdict=replace(loses.verdict, provisional=True))
    tonight = crossover_of("b", [_level(1, 1.3), one_side])
    stored = crossover_of("b", [_level(1, 1.3), _level(16, 1.2)])
    load = LoadJudgement(JUDGED, "", "x", crossover=tonight, baseline_crossover=stored)
    judged = Judgement("spec", "judged", "", "x", load=load)
    (line,) = crossover_failures([judged], ["crossover"])
    assert line.endswith("(provisional: one session a side)")
    assert crossover_failures([judged], ["crossover"], provisional_gates=False) == []
    assert not_gating([judged], ["crossover"]) == [
        f"{line} — reported, not gating (--specdec-provisional report)"
    ]


# --- baselines, configs, suite file, options ------------------------------------------------


def test_load_levels_are_cells_of_the_session_entry_and_checked_on_read() -> None:
    config = _config("spec", {1: [10.0, 11.0], 8: [50.0, 52.0]})
    (entry,) = session_entries(_results(config), config)
    assert entry["suite"] is None and entry["prompts"] == {}
    assert set(entry["levels"]) == {"1", "8"} and entry["levels"]["8"]["runs"] == [50.0, 52.0]
    assert entry["levels"]["8"]["protocol"].startswith("closed-loop")
    doc = {"schema": 1, "key": {}, "sessions": [{"prompts": {}, "levels": {"8": {"n": 2}}}]}
    with pytest.raises(BaselineError, match=r"levels.8 lacks mean_log, sd_log, runs"):
        _check_document(doc, Path("b.json"))
    doc["sessions"][0]["levels"] = {"eight": {}}
    with pytest.raises(BaselineError, match="'eight' is not a client count"):
        _check_document(doc, Path("b.json"))
    cell = {**entry["levels"]["8"], "phase_s": {"extend": "slow"}}
    doc["sessions"][0]["levels"] = {"8": cell}
    with pytest.raises(BaselineError, match=r"levels.8.phase_s must map each forward phase"):
        _check_document(doc, Path("b.json"))
    cell["phase_s"] = {"extend": math.inf}  # JSON's Infinity reads back as a float
    with pytest.raises(BaselineError, match=r"levels.8.phase_s must map each forward phase"):
        _check_document(doc, Path("b.json"))
    cell["phase_s"] = {"extend": 0.4}
    _check_document(doc, Path("b.json"))  # a well-formed one is read


def test_speculative_configs_are_told_by_their_speculation_flags() -> None:
    assert not is_speculative({"args": ["-np", "4", "-c", "8192"]})
    assert is_speculative({"args": ["--spec-type", "ngram-simple"]})
    assert is_speculative({"args": ["--speculative-algorithm", "DFLASH"]})
    assert is_speculative({"draft": "draft", "args": []})
    assert is_speculative({"speculative_config": {"method": "ngram"}})


def test_rounds_option_needs_two_or_more() -> None:
    import argparse

    assert rounds("3") == 3
    for bad in ("1", "x", "-2"):
        with pytest.raises(argparse.ArgumentTypeError, match="rounds >= 2"):
            rounds(bad)


def test_suite_file_levels_rounds_and_extends(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text(
        '[suite]\nengine = "llamacpp"\nworkload = "seed"\n'
        '[models.llamacpp]\ntarget = "t.gguf"\ndrafts = { draft = "d.gguf" }\n'
        '[engines.llamacpp]\nextra_args = ["-np", "1"]\nstartup_timeout_s = 99\n'
        '[configs.mine]\nengine = "llamacpp"\nargs = ["--spec-type", "ngram-simple"]\n'
    )
    sub = tmp_path / "load" / "load.toml"
    sub.parent.mkdir()
    sub.write_text(
        '[suite]\nextends = "../base.toml"\nconcurrency = [16, 1, 4]\nrounds = 3\n'
        'baseline_dir = "baselines/load"\n'
        '[engines.llamacpp]\nextra_args = ["-np", "16"]\n'
    )
    suite = load_suite_settings(sub)
    assert suite.concurrency == (1, 4, 16) and suite.rounds == 3
    assert suite.baseline_dir == "baselines/load"
    assert suite.files == (base, sub)
    llama = suite.engine_settings("llamacpp")
    assert llama.extra_args == ("-np", "16") and llama.startup_timeout_s == 99  # key by key
    assert suite.models_for("llamacpp").target == str(tmp_path / "t.gguf")  # its own folder
    for text, match in (
        ("[suite]\nconcurrency = [0, 4]\n", r"concurrency = \[0, 4\]: give a list"),
        ("[suite]\nrounds = 1\n", "rounds = 1: give a whole number >= 2"),
        ("[suite]\nlevels = [1]\n", r"unknown key\(s\) \['levels'\]"),
        ('[suite]\nextends = "nowhere.toml"\n', "extends = .*nowhere.toml.*no such file"),
        ('[suite]\nbaseline_dir = ""\n', "baseline_dir = '': give a folder path"),
    ):
        sub.write_text(text)
        with pytest.raises(ConfigError, match=match):
            load_suite_settings(sub)
    sub.write_text('[suite]\nextends = "../base.toml"\n')
    base.write_text('[suite]\nextends = "load/load.toml"\n')
    with pytest.raises(ConfigError, match="extend each other in a circle"):
        load_suite_settings(sub)


# --- the level family under simulation (bench/load_calibration.py has the full table) ---------


def _calibration() -> Any:
    return bench("load_calibration")


def test_holm_across_sixteen_levels_keeps_false_alarm_nights_rare_and_finds_a_load_drop() -> None:
    """4 configs x 4 levels a night, 4 rounds a level, ten stored sessions, within 1% and
    between 1% per level plus 1% shared by a boot's levels (fixed seeds)."""
    cal = _calibration()
    sc = cal.Scenario(k=10, within=0.01, between=0.01, shared=0.01)
    null = cal.rates(sc, 150, seed=21)
    drop = cal.rates(cal.Scenario(**{**sc.__dict__, "drop": 0.10}), 100, seed=22)
    assert null.false_alarm_nights <= 0.04, null
    assert drop.power >= 0.85, drop  # the levels it hits (16, 64)
    assert null.mde <= 0.07, null


def test_a_one_session_baseline_alarms_when_boots_differ() -> None:
    """Why a level's baseline wants several sessions: against one stored session (a provisional
    Welch on rounds), a 2% boot-to-boot spread flags most nights; borrowing the boots' spread
    from a config stored beside it flags few."""
    cal = _calibration()
    spread = cal.rates(cal.Scenario(k=1, within=0.01, between=0.02), 60, seed=23)
    assert spread.false_alarm_nights >= 0.4, spread
    # the same nights' levels borrowing the spread of ten sessions of a config stored beside
    borrowed = cal.rates(cal.Scenario(k=1, within=0.01, between=0.02, donors=10), 60, seed=23)
    assert borrowed.false_alarm_nights <= 0.1, borrowed


# --- per-phase GPU time and gauges through the driver (a MockTransport SGLang) ----------------


def test_gauge_reads_start_one_interval_in_and_are_timed() -> None:
    """No read meets a round's first requests; each read's time is kept, failed ones too."""
    every, slow = 0.05, 0.03
    started: list[float] = []

    async def read() -> dict[str, float | None] | None:
        started.append(time.perf_counter() - t0)
        await asyncio.sleep(slow)
        if len(started) == 2:
            raise httpx.ConnectError("refused")
        return {"running": float(len(started)), "queued": 0.0}

    async def main() -> GaugeWatch:
        watch, stop = GaugeWatch(), asyncio.Event()
        poll = asyncio.ensure_future(watch_gauges(read, watch, every, stop))
        while len(started) < 3:
            await asyncio.sleep(0.01)
        stop.set()
        await poll
        return watch

    t0 = time.perf_counter()
    watch = asyncio.run(main())
    assert started[0] >= every  # one interval in, never at the round's start
    assert watch.reads == len(started) and watch.samples == watch.reads - 1  # the failed one
    assert watch.read_s_max >= slow and watch.read_s_total >= slow * watch.reads
    assert watch.max_running == max(float(n) for n in range(1, watch.reads + 1) if n != 2)
    assert watch.facts()["gauge_reads"] == watch.reads
    assert "gauge_reads" not in GaugeWatch().facts()  # no read made: nothing said of reads
    rounds = [
        replace(
            summarize_round(2, 1, 1, [_record(0, 0)], 2.0),
            engine={"gauge_reads": 4, "gauge_read_max_s": 0.12, "gauge_read_s": 0.2},
        )
    ]
    assert gauge_read_summary(rounds) == (
        "4 metrics reads during the rounds, the longest 120 ms, 10.0% of the rounds' time"
    )  # fmt: skip
    assert gauge_read_summary([replace(rounds[0], engine={})]) is None


def test_sglang_phase_seconds_come_from_its_device_timer_counters() -> None:
    from pytest_specdec.engines.base import parse_prometheus

    fake = FakeSGLang()
    before = parse_prometheus(fake.page())
    fake.requests += 4
    after = parse_prometheus(fake.page())
    engine = SGLangEngine()
    assert engine.phase_seconds(before, after) == {"eagle_draft": 0.5, "target_verify": 1.0}
    assert engine.phase_seconds(after, after) == {}  # nothing ran: no phase
    # its forward passes by kind, a kind that did not run left out
    assert engine.forward_passes(before, after) == {"decode_cuda_graph": 8.0,
                                                    "prefill_cuda_graph": 4.0}  # fmt: skip
    assert engine.forward_passes(after, after) == {}
    assert LlamaCppEngine().phase_seconds(before, after) == {}  # not exposed: nothing said


def test_the_driver_records_phase_time_and_gauges_of_runs_and_rounds(tmp_path: Path) -> None:
    from pytest_specdec.core.configs import Registry, preset_configs
    from pytest_specdec.core.suitefile import SuiteSettings
    from pytest_specdec.core.workloads import load_workload
    from pytest_specdec.driver.runner import Runner, RunSettings
    from pytest_specdec.report.load import level_notes

    settings = RunSettings(
        server_url="http://test", engine="sglang", runs=1, warmup=False, rounds=2,
        results_path=tmp_path / "r.json", concurrency=(2,),
    )  # fmt: skip
    runner = Runner(settings, Registry(preset_configs()), SuiteSettings(), load_workload("seed"),
                    transport=httpx.MockTransport(FakeSGLang()))  # fmt: skip
    try:
        server = runner.boot(runner.configs[0])
        (run,) = runner.measure(server, runner.workload.prompts[0])
        assert run.extra["phase_s"] == {"eagle_draft": 0.125, "target_verify": 0.25}
        assert run.accept_length == 4.0  # 8 tokens over 2 verify calls
        runner.load_level(server, 2)
        rounds = runner.level_rounds(server, 2)
    finally:
        runner.close()
    assert len(rounds) == 2
    per_round = 2 * len(runner.workload.prompts)  # 2 clients cover the workload
    for r in rounds:
        assert r.engine["phase_s"] == {"eagle_draft": 0.125 * per_round,
                                       "target_verify": 0.25 * per_round}  # fmt: skip
        assert r.engine["passes"] == {"decode_cuda_graph": 2.0 * per_round,
                                      "prefill_cuda_graph": 1.0 * per_round}  # fmt: skip
        assert r.accept_length == 4.0 and r.accept_source == "metrics-delta"
    doc = json.loads((tmp_path / "r.json").read_text())
    notes = level_notes("baseline", doc["configs"][0])
    spent = f"eagle_draft {125 * per_round} ms, target_verify {250 * per_round} ms"
    steps = f"{2 * per_round} decode steps a round, 187.50 ms of GPU work each"  # 0.375 s / 2
    assert f"baseline at 2 clients: GPU time per round by phase: {spent}; {steps}" in notes


def test_the_time_a_round_ran_no_forward_is_its_wall_less_its_gpu_seconds() -> None:
    """What the host took of a round: its wall time less its phases' GPU seconds (an H200 at
    64 clients: 0.35-0.48 s of a 4.6 s round), warm-up rounds left out; none where a round's
    GPU seconds exceed its wall time, or where no round was timed."""
    from pytest_specdec.measure.levels import no_forward_s, rounds_of
    from pytest_specdec.report.load import level_notes

    config = _config("plain", {64: [9000.0, 8800.0, 8600.0]}, args=())
    for r, (wall, phases) in zip(config["extra"]["load"], [
        (4.6, {"decode": 3.8, "extend": 0.45}),  # warm-up: left out
        (4.6, {"decode": 3.8, "extend": 0.45}),
        (4.8, {"decode": 3.8, "extend": 0.5}),
    ], strict=False):  # fmt: skip
        r.update(wall_s=wall, engine={"phase_s": phases})
    config["extra"]["load"][0]["warmup"] = True
    config["extra"]["load"][2]["engine"] = {}  # a round the timer missed
    seconds, share = no_forward_s(rounds_of(config, 64)) or (None, None)
    assert seconds == pytest.approx(0.35) and share == pytest.approx(0.35 / 4.6)
    notes = level_notes("plain", config)
    assert "plain at 64 clients: GPU time per round by phase: decode 3800 ms, extend 450 ms; " \
        "no forward 350 ms (7.6% of the round)" in notes  # fmt: skip
    config["extra"]["load"][1]["wall_s"] = 4.0  # GPU seconds beyond the wall
    assert no_forward_s(rounds_of(config, 64)) is None
    assert no_forward_s(rounds_of(_config("plain", {4: [1.0]}), 4)) is None


def test_a_speculative_level_whose_draft_is_untimed_says_so() -> None:
    """SGLang's DFLASH times its target's verify and extend, not its draft: the rest of a round
    is then not the host's alone, and the report says what it holds (an H100, DDTree on the
    fork at 16 clients: 3038 ms a round of it, half the round). Without a draft model (NGRAM)
    or with a draft phase timed, the rest is the host's."""
    from pytest_specdec.report.load import level_notes

    config = _config("dflash", {16: [1900.0, 1910.0]}, args=("--speculative-algorithm", "DFLASH"))
    config["config"]["draft"] = "dflash"
    for r in config["extra"]["load"]:
        r.update(wall_s=5.3, engine={"phase_s": {"extend": 0.34, "target_verify": 3.26},
                                     "passes": {"decode_cuda_graph": 275.0}})  # fmt: skip
    (line,) = [n for n in level_notes("dflash", config) if "by phase" in n]
    assert line.endswith(
        "extend 340 ms, target_verify 3260 ms; untimed 1700 ms (32.1% of the round: the host's "
        "part and the draft's forward, which the engine does not time); 275 decode steps a "
        "round, 11.85 ms of timed GPU work each"
    )
    config["config"]["draft"] = None  # no draft model (NGRAM drafts on the host)
    (line,) = [n for n in level_notes("dflash", config) if "by phase" in n]
    assert "; no forward 1700 ms (32.1% of the round); 275 decode steps a round" in line
    config["config"]["draft"] = "dflash"
    for r in config["extra"]["load"]:  # a draft phase timed: the rest is the host's
        r["engine"]["phase_s"]["eagle_draft"] = 0.5
    (line,) = [n for n in level_notes("dflash", config) if "by phase" in n]
    assert "; no forward 1200 ms (22.6% of the round); 275 decode steps a round" in line


def test_load_levels_run_after_the_one_request_tests_of_each_server_session(
    suite_project: pytest.Pytester,
) -> None:
    result = suite_project.runpytest(
        "suites", "--collect-only", "-q", "--spec-config", "baseline,draft-d16",
        "--specdec-concurrency", "1,2", "--specdec-sessions", "2", "-p", "no:cacheprovider",
    )  # fmt: skip
    ids = [line for line in result.outlines if "::" in line]
    for slot in ("baseline", "draft-d16", "baseline@2", "draft-d16@2"):
        mine = [i for i in ids if f"[{slot}-" in i or i.endswith(f"[{slot}]")]
        first_load = min(n for n, i in enumerate(mine) if "test_concurrency.py" in i)
        assert first_load == len(mine) - sum("test_concurrency.py" in i for i in mine), mine
        assert all("test_concurrency.py" in i for i in mine[first_load:])
    assert "test_load_verdict[draft-d16@2]" in ids[-1]  # per-config: the last session only


def test_the_load_suite_runs_every_prefill_in_a_graph_and_freezes_the_engines_collector() -> None:
    """suites/specdec-gpu-load.toml captures a prefill graph for every count of new tokens up to
    256 (SGLang replays one when the new tokens pad to a size at most twice as large: a single
    new token above all), freezes SGLang's collector after the warm-up and has it log its long
    collections; the DDTree fork's interface keeps its prefill eager and logs them too."""
    suite = load_suite_settings(Path(__file__).resolve().parents[1] / "suites" /
                                "specdec-gpu-load.toml")  # fmt: skip
    settings = suite.engine_settings("sglang")
    argv = list(settings.extra_args)
    assert not {"--disable-prefill-cuda-graph", "--disable-cuda-graph"} & set(argv)
    at = argv.index("--cuda-graph-bs-prefill")
    sizes = [int(a) for a in itertools.takewhile(str.isdigit, argv[at + 1 :])]
    assert argv[argv.index("--cuda-graph-max-bs-prefill") + 1] == str(max(sizes)) == "256"
    assert all(any(n <= s <= 2 * n for s in sizes) for n in range(1, max(sizes) + 1))
    assert settings.freeze_gc is True
    fork = list(settings.interfaces["older-graph-flags"])
    for args in (argv, fork):
        assert args[args.index("--gc-warning-threshold-secs") + 1] == "0.05"
    # the two interfaces differ only in how the graph flags are named
    graph = {"--cuda-graph-max-bs-decode", "--cuda-graph-bs-decode", "--cuda-graph-max-bs-prefill",
             "--cuda-graph-bs-prefill", "--cuda-graph-max-bs", "--cuda-graph-bs",
             "--disable-piecewise-cuda-graph"}  # fmt: skip
    assert _without(argv, graph) == _without(fork, graph)


def _without(argv: list[str], flags: set[str]) -> list[str]:
    """argv without the given flags and the numbers that follow each."""
    out: list[str] = []
    skipping = False
    for arg in argv:
        if arg in flags:
            skipping = True
        elif not (skipping and arg.isdigit()):
            skipping = False
            out.append(arg)
    return out


def _h200_boots() -> tuple[Any, dict[str, dict[int, list[Any]]], list[dict[str, Any]]]:
    """bench/load_phases.py and the five H200 boots of `baseline` and `standalone-d16` stored in
    baselines/load (docs/gpu-run.md, "An eleventh H200" and "A thirteenth H200")."""
    load_phases = bench("load_phases")
    runs = Path(__file__).resolve().parent.parent / "docs" / "gpu-run"
    gc, curves = runs / "load-gc", runs / "load-curves"
    files = [gc / "h200-load-cause.json.gz", gc / "h200-bl-load-rerun.json.gz",
             gc / "h200-sd-load-rerun.json.gz", curves / "h200-load.json.gz"]  # fmt: skip
    docs = [load_phases.load_results(path) for path in files]
    return load_phases, load_phases.gathered(docs), docs


def test_the_nightly_plan_for_a_five_percent_level_mde_from_the_h200_boots() -> None:
    """At the five boots' spread, `baseline` at 64 clients (2.9%) needs five boots a night
    against twenty stored for a throughput MDE of 5%; one boot against five stored suffices
    at one client; each night's cost is the boots' recorded GPU-minutes."""
    load_phases, levels, docs = _h200_boots()
    minutes = load_phases.boot_minutes(docs)
    assert 2.0 < minutes["baseline"] < 3.0
    line = load_phases.plan_line(levels["baseline"][64], [5, 10, 20], 0.05, 6, minutes["baseline"])
    assert line is not None
    assert "more than 6 boots a night against 10 stored" in line
    assert "5 boot(s) a night against 20 stored (4.8%" in line
    line = load_phases.plan_line(levels["baseline"][1], [5], 0.05, 6, None)
    assert line == "  throughput MDE 5% or less: 1 boot(s) a night against 5 stored (1.8%)"


def test_stolen_rounds_do_not_account_for_the_h200_boots_spread() -> None:
    """bench/load_phases.py on the H200 runs' five boots of `baseline` (docs/gpu-run.md, "A
    thirteenth H200"): the rounds in which the hypervisor stole more than 0.1% of the CPU time
    are in the two slowest boots at 16 and 64 clients, and without them the boots still spread
    over 2%: the steal the guest sees marks slow boots, it does not make the spread."""
    load_phases, gathered, _ = _h200_boots()
    levels = gathered["baseline"]
    for clients in (16, 64):
        rounds = levels[clients]
        hit = load_phases.stolen(rounds, 0.001)
        assert {r.session for r in hit} == {3, 5}, clients
        lines = load_phases.steal_lines(rounds, 0.001, [5])
        assert lines[0].startswith(f"  stolen over 0.10%: {len(hit)} of 20 rounds, in boot(s) 3, 5")
        sd = float(lines[1].split("sd of their logs ")[1].split("%")[0])
        assert sd > 2.0, lines


def test_the_h200_boots_spread_within_machines_less_than_across_them() -> None:
    """bench/load_phases.py over the eight stored boots of `baseline` (docs/gpu-run.md, "A
    fourteenth H200"): three H200s ran them, four on one, one on another, three on a third,
    and at 64 clients the boots spread 5.5% over all eight but 2.35% within the machines."""
    load_phases, _, docs = _h200_boots()
    runs = Path(__file__).resolve().parent.parent / "docs" / "gpu-run"
    docs = [*docs, load_phases.load_results(runs / "load-store" / "h200-load-store.json.gz")]
    machines: dict[str, dict[int, str]] = {}
    rounds = load_phases.gathered(docs, machines)["baseline"][64]
    assert machines["baseline"] == {
        **dict.fromkeys(range(1, 5), "6f370d15cf5e"), 5: "54028bdcac27",
        **dict.fromkeys(range(6, 9), "82183aac7c9e"),
    }  # fmt: skip
    assert "sd of their logs 5.53%" in (load_phases.boot_spread(rounds, [8]) or "")
    lines = load_phases.machine_lines(rounds, machines["baseline"], [20])
    assert lines[0] == ("  machines: 3 (boot(s) 1, 2, 3, 4 on 6f370d15cf5e; boot(s) 5 on "
                        "54028bdcac27; boot(s) 6, 7, 8 on 82183aac7c9e)")  # fmt: skip
    within = "  within machines: sd of the boots' logs 2.61% / 1.91%, pooled 2.35%; "
    assert lines[1] == f"{within}one boot's MDE against its own machine's 20 stored 7.9%"
    one = {boot: "m" for boot in machines["baseline"]}
    assert load_phases.machine_lines(rounds, one, [20]) == []  # one machine: nothing to split


def test_gpu_work_per_decode_pass_leaves_out_the_occupancy() -> None:
    """bench/load_phases.py: two boots whose rounds did the same work per decode step, one of
    them in more steps (late arrivals: fewer requests a step), spread 0% per pass where their
    work per round spread 3%; rounds without a pass count give no line."""
    load_phases = bench("load_phases")
    from pytest_specdec.measure.levels import rounds_of

    config = {**_config("plain", {64: [9000.0] * 3}, session=1, args=())}
    second = _config("plain", {64: [8700.0] * 3}, session=2, args=())
    config["extra"]["load"] += second["extra"]["load"]
    for r in config["extra"]["load"]:
        steps = 640.0 if r["session"] == 1 else 660.0
        passes = {"decode_cuda_graph": steps, "prefill_cuda_graph": 70.0}
        r["engine"] = {"phase_s": {"decode": steps * 0.00577, "extend": 0.45}, "passes": passes}
    rounds = [r for r in rounds_of(config, 64) if not r.warmup]
    assert {load_phases.decode_passes(r) for r in rounds} == {640.0, 660.0}
    per_round = load_phases.work_spread(rounds, [5])
    assert per_round is not None and "sd of their logs 2.18%" in per_round
    per_pass = load_phases.step_spread(rounds, [5])
    assert per_pass == ("  GPU work per decode pass: 0.00577 / 0.00577 s: sd of their logs 0.00%; "
                        "one boot's MDE against 5 stored 0.0%")  # fmt: skip
    for r in rounds:
        r.engine.pop("passes")
    assert load_phases.step_spread(rounds, [5]) is None


def _night_of(name: str, seed: int, shift: float, args: tuple[str, ...]) -> dict[str, Any]:
    """One boot of ``name`` at 1 and 16 clients: five rounds 0.5% apart around a level moved
    by the boot's own ``shift`` (the session effect)."""
    levels = {c: _noisy(seed * 100 + c, 100.0 * (1 + c) * shift, cv=0.005) for c in (1, 16)}
    doc = _results(_config(name, levels, args=args))
    doc["started_at"] = f"2026-12-{seed + 1:02d}T00:00:00+00:00"
    return doc


def test_a_short_history_borrows_the_spread_of_the_configs_stored_beside_it(
    tmp_path: Path,
) -> None:
    """One stored boot of a speculative config says nothing of how boots spread; Welch on its
    rounds takes a boot's own 4% wobble for a regression. Judged as the plugin judges it, the
    level borrows the spread of the plain config stored beside it with six boots (the same
    engine settings, workload and hardware): 4% is within it, 15% is not."""
    from pytest_specdec.verdict.baselines import baseline_path, key_for, load_baseline
    from pytest_specdec.verdict.judge import judge_baseline
    from pytest_specdec.verdict.sessions import update_baseline

    plain, spec = (), ("--spec-type", "draft-simple")
    effects = [1.0, 1.04, 0.97, 1.02, 0.96, 1.01]  # how six boots of the plain config landed
    for seed, shift in enumerate(effects):
        doc = _night_of("plain", seed, shift, plain)
        update_baseline(doc, doc["configs"][0], tmp_path)
        other = _night_of("alien", seed, shift * 0.8, plain)  # another workload: not a neighbour
        other["workload"]["sha256"] = "w2"
        update_baseline(other, other["configs"][0], tmp_path)
    stored = _night_of("spec", 10, 1.0, spec)
    path = update_baseline(stored, stored["configs"][0], tmp_path).split(": ")[1]
    (Path(path).parent / "broken--m.json").write_text("{")  # unreadable: left out, not raised

    def judged(shift: float, seed: int, borrow: bool = True) -> dict[int, Any]:
        doc = _night_of("spec", seed, shift, spec)
        if borrow:
            load = judge_baseline(doc, doc["configs"][0], tmp_path, POLICY).load
        else:  # the level judged on its rounds alone
            found = load_baseline(baseline_path(tmp_path, key_for(doc, doc["configs"][0])))
            assert found is not None
            load = judge_load_history(doc["configs"][0], found, POLICY)
        assert load is not None
        adjust_load([load], POLICY)
        return {c: lv.verdict for c, lv in load.levels.items()}

    wobble = judged(0.96, 11)  # another boot, nothing changed
    for v in wobble.values():
        assert v.method == "borrowed-spread" and v.provisional, v.explanation
        assert v.outcome is not Outcome.REGRESSED, v.explanation
        assert v.spread_source == "plain (6 sessions)" and (v.n_new, v.n_ref) == (1, 1)
        assert v.df > 4  # the spread's, with the rounds' own noise (Satterthwaite)
        assert "borrowed from plain (6 sessions)" in v.explanation
    # the same boot judged on its rounds alone (no neighbour) is the false alarm
    alone = judged(0.96, 11, borrow=False)
    assert {v.method for v in alone.values()} == {"welch-provisional"}
    assert {v.outcome for v in alone.values()} == {Outcome.REGRESSED}
    slow = judged(0.85, 12)
    assert {c: v.outcome for c, v in slow.items()} == {1: Outcome.REGRESSED, 16: Outcome.REGRESSED}
    # the plain config's own six boots are judged on their own history: nothing borrowed
    again = _night_of("plain", 13, 1.0, plain)
    load = judge_baseline(again, again["configs"][0], tmp_path, POLICY).load
    assert load is not None and {lv.verdict.method for lv in load.levels.values()
                                 if lv.verdict} == {"prediction-interval"}  # fmt: skip


def test_the_boot_rows_show_the_http_front_and_the_client_beside_the_scheduler() -> None:
    """bench/load_phases.py's row per boot: the busiest thread of an engine process other than
    the scheduler (SGLang's HTTP front, 0.73-0.90 CPUs at 64 clients of `baseline` on an H200)
    and of the load client, each the most any round of the boot read; '-' where not read."""
    load_phases, levels, _ = _h200_boots()
    rows = load_phases.boot_rows(levels["baseline"][64], [])
    fronts = [float(row.split(" | ")[6]) for row in rows if row.split(" | ")[6] != "-"]
    assert fronts and all(0.6 < f < 1.0 for f in fronts), rows
    assert {row.split(" | ")[7] for row in rows} == {"-"}  # these runs predate the client's
    host = [{"busiest": {"name": "sched"}, "client": {"cpus": 0.2, "thread": 0.12},
             "busy_threads": [{"name": "sched", "cpu": 1, "cpus": 1.0},
                              {"name": "front", "cpu": 2, "cpus": 0.4}]},
            {"busiest": {"name": "sched"}, "client": {"cpus": 0.3, "thread": 0.2},
             "busy_threads": [{"name": "front", "cpu": 2, "cpus": 0.5}]}]  # fmt: skip
    assert load_phases.other_thread(host) == 0.5 and load_phases.client_thread(host) == 0.2
    assert load_phases.other_thread([{}]) is None and load_phases.client_thread([{}]) is None


def test_the_stored_speedup_curve_keeps_the_sessions_of_tonights_machine(tmp_path: Path) -> None:
    """The crossover gate compares tonight's curve with the stored one. Where five sessions of
    tonight's machine are stored beside other machines' (``--specdec-same-machine auto``), the
    stored curve is theirs, as the history that judges the levels is: on this machine the
    speculative config pays 1.2x at 16 clients, on the other it loses."""
    from pytest_specdec.verdict.judge import judge_baseline
    from pytest_specdec.verdict.sessions import update_baseline

    def night(uuid: str, seed: int, speedup16: float) -> dict[str, Any]:
        plain = _config("plain", {1: _noisy(seed, 100.0), 16: _noisy(seed + 1, 1000.0)},
                        args=())  # fmt: skip
        spec = _config("spec", {1: _noisy(seed + 2, 150.0),
                                16: _noisy(seed + 3, 1000.0 * speedup16)})  # fmt: skip
        doc = _results(plain, spec)
        doc["started_at"] = f"2026-12-{seed + 1:02d}T00:00:00+00:00"
        doc["gpu"] = {"devices": [{"name": "NVIDIA H200", "uuid": uuid, "driver_version": "1"}]}
        return doc

    for seed in range(8):
        doc = night("GPU-a", seed, 1.2) if seed < 5 else night("GPU-b", seed, 0.8)
        for config in doc["configs"]:
            update_baseline(doc, config, tmp_path)
    tonight = night("GPU-a", 20, 1.2)
    spec = tonight["configs"][1]

    def stored_state(mode: str) -> str:
        load = judge_baseline(tonight, spec, tmp_path, POLICY, same_machine=mode).load
        assert load is not None and load.baseline_crossover is not None
        return {p.clients: p.state for p in load.baseline_crossover.points}[16]

    assert stored_state("auto") == stored_state("always") == "pays"
    assert stored_state("never") != "pays"  # eight sessions of two machines: 1.2x and 0.8x
