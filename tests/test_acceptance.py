"""The acceptance verdict on results documents (no engine): zero noise decided at once, noise
learned from sessions, history, Holm, per-position rates, and which verdicts fail the run."""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.values import fail_on
from pytest_specdec.verdict.acceptance import (
    EXACT,
    NO_DATA,
    adjust_accept,
    judge_accept_history,
    judge_accept_reference,
    short,
)
from pytest_specdec.verdict.baselines import Baseline, baseline_path, key_for, key_mismatch
from pytest_specdec.verdict.gate import adjust, failures, not_gating
from pytest_specdec.verdict.judge import judge_baseline
from pytest_specdec.verdict.sessions import update_baseline
from pytest_specdec.verdict.stats import VerdictPolicy

PROMPTS = ["code", "prose", "arith"]
POLICY = VerdictPolicy()


def run(prompt: str, accept: float | None, session: int = 1, tps: float = 100.0,
        positions: list[float] | None = None) -> dict[str, Any]:  # fmt: skip
    extra = {"accept_rate_per_position": positions} if positions else {}
    return {"phase": "measure", "prompt": prompt, "session": session, "tok_per_s": tps,
            "accept_length": accept, "error": None, "extra": extra}  # fmt: skip


def config(name: str, accepts: dict[str, list[list[float]]], **kw: Any) -> dict[str, Any]:
    """A config whose prompt p has, per session, the given per-request accept lengths."""
    runs = [
        run(p, a, session=i + 1, **kw)
        for p, sessions in accepts.items()
        for i, values in enumerate(sessions)
        for a in values
    ]
    return {"name": name, "engine": "llamacpp", "runs": runs, "models": {}, "config": {}}


def doc(*configs: dict[str, Any], temperature: float = 0.0) -> dict[str, Any]:
    return {
        "configs": list(configs),
        "workload": {"prompts": PROMPTS, "sha256": "w"},
        "host": {"cpu_model": "cpu", "cpu_count": 2},
        "options": {"max_tokens": 32, "temperature": temperature, "top_p": 0.95, "seed": 7},
        "started_at": f"t{random.random()}",
    }


def same(values: dict[str, float], sessions: int = 1, n: int = 3) -> dict[str, list[list[float]]]:
    return {p: [[v] * n for _ in range(sessions)] for p, v in values.items()}


def sampled(rng: random.Random, means: dict[str, float], cv: float, sessions: int = 3,
            n: int = 5) -> dict[str, list[list[float]]]:  # fmt: skip
    return {
        p: [[m * math.exp(rng.gauss(0, cv)) for _ in range(n)] for _ in range(sessions)]
        for p, m in means.items()
    }


def test_zero_noise_is_said_and_a_change_beyond_delta_is_decided_at_once() -> None:
    """llama.cpp at temperature 0 repeats every accept length: 2.80 → 2.33 on one prompt (-5.9%
    on the suite) is decided without a test; +1.5% on one prompt (+0.5%) stays inside δ 1%."""
    ref = config("draft-d4", same({"code": 3.1, "prose": 2.2, "arith": 2.80}))
    worse = config("draft-d4b", same({"code": 3.1, "prose": 2.2, "arith": 2.33}))
    j = judge_accept_reference(doc(worse, ref), worse, ref, POLICY)
    assert j.suite is not None and j.suite.method == EXACT
    assert (j.suite.n_new, j.suite.n_ref) == (3, 3)  # runs a side, each all prompts
    assert j.outcome == "REGRESSED" and j.suite.ratio == pytest.approx((2.33 / 2.8) ** (1 / 3))
    assert "noise is zero" in j.message and "noise: zero: all 6 run(s) in 2 session(s)" in j.message
    assert j.prompts["arith"].outcome.value == "REGRESSED"
    assert j.prompts["code"].outcome.value == "UNCHANGED"
    assert short(j.to_dict()) == "REGRESSED -5.9% exact"
    near = config("near", same({"code": 3.1, "prose": 2.2, "arith": 2.80 * 1.015}))
    assert judge_accept_reference(doc(near, ref), near, ref, POLICY).outcome == "UNCHANGED"


def test_noise_is_learned_from_sessions_when_sampling() -> None:
    rng = random.Random(5)
    means = {"code": 3.0, "prose": 2.4, "arith": 2.6}
    ref = config("r", sampled(rng, means, 0.08))
    same_again = config("a", sampled(rng, means, 0.08))
    j = judge_accept_reference(doc(same_again, ref), same_again, ref, POLICY)
    assert j.suite is not None and j.suite.method == "welch" and not j.suite.provisional
    assert j.outcome != "REGRESSED" and "within-session CV" in (j.noise or "")
    assert "between-session CV" in (j.noise or "")
    worse = config("w", sampled(rng, {p: m * 0.85 for p, m in means.items()}, 0.08))
    j = judge_accept_reference(doc(worse, ref), worse, ref, POLICY)
    assert j.outcome == "REGRESSED" and j.suite is not None and j.suite.mde > 0
    one = config("one", sampled(rng, means, 0.08, sessions=1))
    j = judge_accept_reference(doc(one, ref), one, ref, POLICY)
    assert j.suite is not None and j.suite.provisional


def test_no_change_rarely_raises_an_alarm_under_sampling_noise() -> None:
    """300 seeded A/B nights at 8% per-request and 2% between-session noise, 3 sessions a
    side, nothing changed: false alarms stay near alpha."""
    rng = random.Random(11)
    alarms = 0
    for _ in range(300):
        sides = []
        for name in ("a", "b"):
            shift = {p: 2.5 * math.exp(rng.gauss(0, 0.02)) for p in PROMPTS}
            sides.append(config(name, sampled(rng, shift, 0.08, sessions=3, n=4)))
        j = judge_accept_reference(doc(*sides), sides[0], sides[1], POLICY)
        alarms += j.outcome == "REGRESSED"
    assert alarms / 300 < 0.03


def test_against_history_uses_the_stored_per_request_values(tmp_path: Path) -> None:
    rng = random.Random(3)
    means = {"code": 3.0, "prose": 2.4, "arith": 2.6}
    root = tmp_path / "bl"
    for _ in range(6):
        past = config("draft-d4", sampled(rng, means, 0.06, sessions=1))
        update_baseline(doc(past, temperature=0.8), past, root)
    new = config("draft-d4", sampled(rng, {p: m * 0.9 for p, m in means.items()}, 0.06, 1))
    results = doc(new, temperature=0.8)
    path = baseline_path(root, key_for(results, new))
    assert path.name.endswith("--t0-8-p0-95-s7.json")  # kept per sampling setting
    j = judge_baseline(results, new, root, POLICY)
    assert j.acceptance is not None and j.acceptance.suite is not None
    assert j.acceptance.suite.method == "prediction-interval"
    assert j.acceptance.outcome == "REGRESSED", j.acceptance.message
    assert "6 sessions" in (j.acceptance.noise or "")
    greedy = doc(new)
    assert judge_baseline(greedy, new, root, POLICY).status == "no-baseline"


def test_sessions_stored_before_per_request_values_are_read_by_their_mean(tmp_path: Path) -> None:
    stored = {"prompts": {p: {"n": 3, "mean_log": 4.6, "sd_log": 0.01, "runs": [100.0] * 3,
                              "accept_length": 2.5} for p in PROMPTS}}  # fmt: skip
    baseline = Baseline(tmp_path / "b.json", {}, [stored, stored])
    new = config("c", same({p: 2.5 for p in PROMPTS}))
    j = judge_accept_history(doc(new), new, baseline, POLICY)
    assert j.outcome == "UNCHANGED" and j.suite is not None and j.suite.method == EXACT
    lower = config("c", same({p: 2.3 for p in PROMPTS}))
    assert judge_accept_history(doc(lower), lower, baseline, POLICY).outcome == "REGRESSED"


def test_no_accept_length_is_no_data_and_does_not_gate() -> None:
    plain = config("baseline", {p: [[None, None]] for p in PROMPTS})  # type: ignore[list-item]
    spec = config("ngram", same({p: 2.0 for p in PROMPTS}))
    j = judge_accept_reference(doc(spec, plain), spec, plain, POLICY)
    assert j.status == NO_DATA and "reference has no accept length" in j.message
    j = judge_accept_reference(doc(plain, spec), plain, spec, POLICY)
    assert j.status == NO_DATA and "reports no accept length" in j.message
    assert short(j.to_dict()) == "-"


def test_a_prompt_without_accept_length_is_left_out_and_named() -> None:
    accepts = same({"code": 3.0, "prose": 2.0})
    accepts["arith"] = [[None] * 3]  # type: ignore[list-item]
    a, b = config("a", accepts), config("b", accepts)
    j = judge_accept_reference(doc(a, b), a, b, POLICY)
    assert j.outcome == "UNCHANGED" and j.excluded == ["arith"]


def test_per_position_rates_are_compared_and_named_when_they_move() -> None:
    ref = config("r", same({p: 2.5 for p in PROMPTS}), positions=[0.8, 0.6, 0.4, 0.3])
    new = config("n", same({p: 2.5 for p in PROMPTS}), positions=[0.8, 0.6, 0.3, 0.2])
    j = judge_accept_reference(doc(new, ref), new, ref, POLICY)
    assert [round(p["change"] or 0, 3) for p in j.positions] == [0.0, 0.0, -0.25, -0.333]
    assert "position 3 -25.0%, position 4 -33.3%" in j.message


def test_holm_across_configs_and_what_fails_the_run() -> None:
    rng = random.Random(8)
    means = {p: 2.5 for p in PROMPTS}
    ref = config("ref", sampled(rng, means, 0.05))
    worse = config("worse", sampled(rng, {p: 2.0 for p in PROMPTS}, 0.05))
    other = config("other", sampled(rng, means, 0.05))
    results = doc(worse, other, ref)
    raw = [judge_accept_reference(results, c, ref, POLICY) for c in (worse, other)]
    before = [j.suite.p_adjusted for j in raw if j.suite]
    adjust_accept(raw, POLICY)
    assert before == [None, None] and all(j.suite and j.suite.p_adjusted for j in raw)
    from pytest_specdec.verdict.judge import judge_reference

    judged = adjust([judge_reference(results, c, ref, POLICY) for c in (worse, other)], POLICY)
    bad = judged[0]
    assert bad.acceptance is not None and bad.acceptance.outcome == "REGRESSED"
    assert bad.outcome != "REGRESSED"  # tok/s identical on both sides
    assert failures(judged, fail_on("regressed")) == [f"worse: {bad.acceptance.message}"]
    assert failures(judged, fail_on("accept-regressed")) != []
    assert failures(judged, fail_on("tok-regressed")) == []
    assert not_gating(judged, fail_on("regressed")) == []  # three sessions a side: final


def test_fail_on_values() -> None:
    assert fail_on("regressed,accept-inconclusive") == ("regressed", "accept-inconclusive")
    for bad in ("accept-worse", "tokregressed", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="accept-<outcome> or load-<outcome>"):
            fail_on(bad)


def test_sampling_is_part_of_the_key_and_greedy_keys_stay_as_they_were() -> None:
    c = config("c", same({p: 2.0 for p in PROMPTS}))
    greedy, hot = key_for(doc(c), c), key_for(doc(c, temperature=0.8), c)
    assert greedy["sampling"] is None
    assert hot["sampling"] == {"temperature": 0.8, "top_p": 0.95, "seed": 7}
    old = {k: v for k, v in greedy.items() if k != "sampling"}  # stored before sampling existed
    assert key_mismatch(old, greedy) == []
    assert any(line.startswith("sampling:") for line in key_mismatch(greedy, hot))


def test_history_finds_a_change_point_in_accept_length_alone() -> None:
    """30 nights at temperature 0.8: accept length 2.50 with 0.5% noise, then 2.40 from night
    20 on, while tok/s stays level: a change point in accept length, none in tok/s."""
    from pytest_specdec.verdict.history import ACCEPT, change_points
    from pytest_specdec.verdict.nights import Night

    rng = random.Random(4)
    series = [
        Night(f"2026-11-{i + 1:02d}", math.log(100) + rng.gauss(0, 0.01), 1,
              (2.5 if i < 20 else 2.4) * math.exp(rng.gauss(0, 0.005)), "b1", None)
        for i in range(30)
    ]  # fmt: skip
    assert change_points(series) == []
    (point,) = change_points(series, signal=ACCEPT)
    assert point.night == "2026-11-21" and point.signal == ACCEPT
    assert point.ratio == pytest.approx(0.96, abs=0.01) and point.ci_high < 1
    assert point.describe().startswith("accept length drift since 2026-11-21")


def test_sampling_settings_reach_each_engines_request() -> None:
    from pytest_specdec.driver.settings import RunSettings
    from pytest_specdec.engines.base import RequestSpec, chat_payload
    from pytest_specdec.engines.sglang import native_payload

    opts = RunSettings(temperature=0.8, top_p=0.95, seed=3)
    req = RequestSpec("p", [{"role": "user", "content": "hi"}], "hi", 16, temperature=0.8,
                      top_p=0.95, seed=opts.request_seed(2))  # fmt: skip
    chat = chat_payload(req)
    assert (chat["temperature"], chat["top_p"], chat["seed"]) == (0.8, 0.95, 5)
    params = native_payload(req)["sampling_params"]
    assert params == {"temperature": 0.8, "top_p": 0.95, "sampling_seed": 5, "max_new_tokens": 16}
    greedy = chat_payload(RequestSpec("p", [], "hi", 16, top_p=0.95, seed=1))
    assert greedy["temperature"] == 0.0 and "seed" not in greedy and "top_p" not in greedy
    assert RunSettings().request_seed(0) is None and RunSettings(seed=4).request_seed(0) == 4
