"""Why a verdict moved: drafter (accept length) or kernel side (speed per verify step), and the
engine environment a run inherited. Checked on rules, then on the regressions injected on an
NVIDIA H200 (docs/gpu-run/h200-memory-bound-*.json) against the baselines stored there."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests_support import load_judged

from pytest_specdec.engines.base import EngineBase
from pytest_specdec.engines.llamacpp import LlamaCppEngine
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.verdict.compare import attribute
from pytest_specdec.verdict.gate import adjust
from pytest_specdec.verdict.judge import engine_env_change, judge_baseline
from pytest_specdec.verdict.sessions import update_baseline, with_score
from pytest_specdec.verdict.stats import Outcome, Verdict, VerdictPolicy

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "docs" / "gpu-run"
BOOTS = RUNS / "sglang-boots"  # SGLang with the draft attention in Triton: three plain boots


def verdict(outcome: Outcome, ratio: float) -> Verdict:
    return Verdict(
        outcome, ratio, ratio * 0.98, ratio * 1.02, 0.001, 0.999, 0.001, 0.03, 5, 5, 0.03, None,
        "welch", False, None, "explained", 0.01, 0.9, 0.01, 8.0,
    )  # fmt: skip


def accept(new: float | None, ref: float | None) -> dict[str, dict[str, float | None]]:
    return {"p1": {"new": new, "reference": ref}, "p2": {"new": new, "reference": ref}}


def test_lower_accept_length_at_the_same_step_speed_is_the_drafter() -> None:
    cause, text = attribute(verdict(Outcome.REGRESSED, 0.80), accept(3.2, 4.0))
    assert cause == "drafter"
    assert text is not None and "accept length -20.0%" in text and "fewer drafted" in text


def test_same_accept_length_and_a_slower_step_is_the_kernel_side() -> None:
    cause, text = attribute(verdict(Outcome.REGRESSED, 0.87), accept(4.01, 4.0))
    assert cause == "kernel"
    assert text is not None and "got slower: not the drafter" in text
    assert "verify steps/s -13.2%" in text
    faster = attribute(verdict(Outcome.IMPROVED, 1.2), accept(4.0, 4.0))
    assert faster[0] == "kernel" and "got faster" in str(faster[1])


def test_both_moving_and_no_speculation_and_no_change() -> None:
    assert attribute(verdict(Outcome.REGRESSED, 0.76), accept(3.3, 4.0))[0] == "both"
    target = attribute(verdict(Outcome.REGRESSED, 0.9), accept(None, None))
    assert target[0] == "target" and "not a drafter" in str(target[1])
    assert attribute(verdict(Outcome.UNCHANGED, 1.0), accept(None, None)) == (None, None)
    same = attribute(verdict(Outcome.UNCHANGED, 1.0), accept(4.0, 4.0))
    assert same[0] is None and "accept length unchanged" in str(same[1])


def test_speculation_against_plain_decoding_says_what_a_step_costs() -> None:
    cause, text = attribute(verdict(Outcome.IMPROVED, 1.777), accept(8.78, None))
    assert cause == "speculation"
    assert text is not None and "8.78 tokens per verify step" in text
    assert "each step costing 4.94 plain decode steps" in text


def test_inherited_engine_environment_is_filtered_by_engine_and_secrets_hidden() -> None:
    environ = {
        "LLAMA_ARG_UBATCH": "4", "GGML_CUDA_DISABLE_GRAPHS": "1", "LLAMA_API_KEY": "s3cret",
        "CUDA_LAUNCH_BLOCKING": "1", "SGLANG_DDTREE_MAX_TOPK": "8", "HOME": "/root",
    }  # fmt: skip
    assert LlamaCppEngine().inherited_env(environ) == {
        "CUDA_LAUNCH_BLOCKING": "1", "GGML_CUDA_DISABLE_GRAPHS": "1", "LLAMA_API_KEY": "***",
        "LLAMA_ARG_UBATCH": "4",
    }  # fmt: skip
    assert SGLangEngine().inherited_env(environ) == {
        "CUDA_LAUNCH_BLOCKING": "1", "SGLANG_DDTREE_MAX_TOPK": "8",
    }  # fmt: skip
    assert EngineBase().inherited_env({"PATH": "/bin"}) == {}


def test_environment_change_against_the_latest_baseline_session() -> None:
    config = {"extra": {"engine_env": {"LLAMA_ARG_UBATCH": "4", "GGML_X": "1"}}}
    note = engine_env_change({"engine_env": {"GGML_X": "1", "LLAMA_ARG_THREADS": "2"}}, config)
    assert note == (
        "engine environment differs from the latest baseline session: "
        "LLAMA_ARG_THREADS: 2 → unset; LLAMA_ARG_UBATCH: unset → 4"
    )
    assert engine_env_change({"engine_env": {"GGML_X": "1"}}, {"extra": {"engine_env": {
        "GGML_X": "1"}}}) is None  # fmt: skip
    assert engine_env_change({}, config) is None  # an older baseline recorded none


# The SGLang baselines as they stood before the draft attention moved to Triton (the runs
# named h200-sglang-* were judged against these; baselines/ now holds the later ones).
FA3_BASELINES = RUNS / "sglang-fa3-baselines"


def judged(name: str, allow_mismatch: bool = False, prefix: str = "h200-memory-bound") -> list[Any]:
    """The run's verdicts again, as the plugin made them: Holm across the run's configs."""
    doc = json.loads((RUNS / f"{prefix}-{name}.json").read_text())
    policy = VerdictPolicy()
    root = FA3_BASELINES if prefix == "h200-sglang" else REPO / "baselines"
    found = [judge_baseline(doc, cfg, root, policy, allow_mismatch) for cfg in doc["configs"]]
    return adjust(found, policy)


@pytest.mark.parametrize(
    ("run", "cause", "env"),
    [
        ("slower-verify", "kernel", "LLAMA_ARG_UBATCH: unset → 4"),
        ("draft-p-min", "both", "LLAMA_ARG_SPEC_DRAFT_P_MIN: unset → 0.95"),
    ],
)
def test_h200_injected_engine_changes_are_regressions_with_their_cause(
    run: str, cause: str, env: str
) -> None:
    (j,) = judged(run)
    assert j.outcome == "REGRESSED" and j.cause == cause, j.message
    assert any(env in note for note in j.notes)


def test_h200_worse_drafter_is_a_drafter_regression_once_forced() -> None:
    (refused,) = judged("far-draft")
    assert refused.status == "mismatch" and "draft_model" in refused.message
    (j,) = judged("far-draft", allow_mismatch=True)
    assert j.outcome == "REGRESSED" and j.cause == "drafter", j.message
    assert any(n.startswith("FORCED comparison") for n in j.notes)


def test_sglang_worse_drafter_with_cheaper_steps_is_the_drafter() -> None:
    """SGLang on the H200, standalone-d16 with the far draft: accept length -56%, and each
    verify step got cheaper, which made up part of the loss: the drafter. (0.635x against the
    first stored session, 0.715x against the two the baseline holds now.)"""
    (j,) = judged("far-draft", allow_mismatch=True, prefix="h200-sglang")
    assert j.outcome == "REGRESSED" and j.cause == "drafter", j.message
    assert j.suite is not None and j.suite.ratio == pytest.approx(0.715, abs=0.005)
    assert "each step got cheaper" in j.message


def first_sessions_only(tmp_path: Path, keep: int) -> Path:
    """The SGLang baselines of the fa3 runs as they stood when they held ``keep`` sessions."""
    for path in FA3_BASELINES.rglob("*.json"):
        doc = json.loads(path.read_text())
        doc["sessions"] = doc["sessions"][:keep]
        out = tmp_path / path.relative_to(FA3_BASELINES)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc))
    return tmp_path


def test_sglang_rerun_on_another_h200_against_one_session_and_against_two(tmp_path: Path) -> None:
    """SGLang 0.5.17 rebooted on another H200, nothing changed: accept lengths identical to the
    token, standalone-d16 14-21% slower per step. One stored session cannot know that spread
    between boots, so it called the rerun REGRESSED (provisional), kernel side. With that rerun
    stored as a second session, a second boot is not flagged, while the decode CUDA graphs
    switched off still are, kernel side."""
    policy = VerdictPolicy()
    rerun = json.loads((RUNS / "h200-sglang-rerun.json").read_text())
    one = first_sessions_only(tmp_path, keep=1)
    found = {j.config: j for j in adjust([judge_baseline(rerun, c, one, policy)
                                          for c in rerun["configs"]], policy)}  # fmt: skip
    alarm = found["standalone-d16"]
    assert alarm.outcome == "REGRESSED" and alarm.cause == "kernel", alarm.message
    assert alarm.suite is not None and alarm.suite.provisional
    assert alarm.suite.ratio == pytest.approx(0.789, abs=0.005)
    assert "accept length +0.0%" in alarm.message
    (second,) = judged("rerun2", prefix="h200-sglang")
    assert second.outcome == "INCONCLUSIVE" and second.against == "baseline (2 sessions)"
    assert second.suite is not None and second.suite.ci_low < 1.0 < second.suite.ci_high
    (graphs,) = judged("no-cuda-graph", allow_mismatch=True, prefix="h200-sglang")
    assert graphs.outcome == "REGRESSED" and graphs.cause == "kernel", graphs.message
    assert graphs.suite is not None and graphs.suite.ratio < 0.2


def test_a_step_that_moved_against_the_verdict_is_not_its_cause() -> None:
    cause, text = attribute(verdict(Outcome.REGRESSED, 0.64), accept(4.5, 10.2))
    assert cause == "drafter" and "cheaper" in str(text)
    cause, text = attribute(verdict(Outcome.REGRESSED, 0.80), accept(4.4, 4.0))
    assert cause == "kernel" and "moved the other way" in str(text)


def test_h200_rerun_and_a_change_below_delta_are_not_flagged() -> None:
    rerun = {j.config: j for j in judged("rerun")}
    assert [j.outcome for j in rerun.values()].count("UNCHANGED") == 3
    # draft-d16 ran 6.6% slower with the same acceptance: between-session noise of the
    # launch-bound draft, which Holm across the 4 configs kept from a false alarm (p 0.0104).
    d16 = rerun["draft-d16"]
    assert d16.outcome == "INCONCLUSIVE" and d16.suite is not None
    assert d16.suite.p_adjusted == pytest.approx(0.0104, abs=5e-4)
    (graphs,) = judged("no-cuda-graphs")  # -1.9%: below the 3% floor, not a regression
    assert graphs.outcome != "REGRESSED" and graphs.cause is None


def test_explain_keeps_the_cause_after_holm_adjustment() -> None:
    (j,) = judged("slower-verify")
    adjusted = replace(j, suite=replace(j.suite, p_adjusted=0.02)).explain()
    assert adjusted.message.endswith("got slower: not the drafter")


def boot(name: str, score: str) -> dict[str, Any]:
    return with_score(json.loads((BOOTS / f"h200-{name}.json").read_text()), score)


def stored(tmp_path: Path, names: list[str], score: str) -> Path:
    """A baseline store holding these boots' sessions, on ``score``."""
    root = tmp_path / score
    for name in names:
        doc = boot(name, score)
        for config in doc["configs"]:
            update_baseline(doc, config, root)
    return root


def standalone(doc: dict[str, Any], root: Path) -> Any:
    (config,) = [c for c in doc["configs"] if c["name"] == "standalone-d16"]
    return judge_baseline(doc, config, root, VerdictPolicy())


def test_sglang_decode_score_gates_a_5_percent_verify_slowdown_and_not_a_reboot(
    tmp_path: Path,
) -> None:
    """SGLang 0.5.17 on an H200, standalone-d16 with the draft attention in Triton, three boots
    with nothing changed and one with ~5% more GPU time in every target verify pass. Decode
    tok/s repeated within 0.2% from boot to boot; the end-to-end score moved 2-3% with the time
    to first token. On the decode score a reboot is UNCHANGED and the injected slowdown is
    REGRESSED, kernel side; on the end-to-end score the same reboot is left undecided."""
    decode = stored(tmp_path, ["session", "rerun"], "decode")
    again = standalone(boot("rerun2", "decode"), decode)
    assert again.outcome == "UNCHANGED" and again.against == "baseline (2 sessions)", again.message
    assert again.suite is not None and abs(again.suite.ratio - 1) < 0.005
    slower = standalone(boot("inject-verify", "decode"), decode)
    assert slower.outcome == "REGRESSED" and slower.cause == "kernel", slower.message
    assert slower.suite is not None and slower.suite.ratio == pytest.approx(0.947, abs=0.003)
    assert slower.score == "decode" and "accept length +0.0%" in slower.message
    e2e = standalone(boot("rerun", "e2e"), stored(tmp_path, ["session"], "e2e"))
    assert e2e.outcome == "INCONCLUSIVE", e2e.message
    assert e2e.suite is not None and e2e.suite.ratio == pytest.approx(0.972, abs=0.003)


def test_h200_load_slowdowns_are_told_kernel_from_host_by_the_gpus_own_work() -> None:
    """SGLang 0.5.17 on an H200 under load (docs/gpu-run.md, "An eleventh H200" and "A twelfth
    H200"): the verify slowdown injected in batches of five or more is the kernels (the GPU's
    own work per round grew by as much as the round did); a rerun boot that ran slow at 16
    clients and one that ran fast at 64, with every graph replay's GPU time as before, are the
    host."""
    gc, full = RUNS / "load-gc", RUNS / "load-full"
    sglang = Path("baselines") / "gpu-nvidia-h200-x1" / "sglang"
    inject = load_judged(gc / "h200-load-inject.json.gz", gc / sglang)["standalone-d16"]
    for clients in (16, 64):
        level = inject[clients]
        assert level.verdict.outcome == Outcome.REGRESSED and level.cause == "kernel"
        assert "got slower: not the drafter; the GPU's own work per round" in level.cause_text
    slow = load_judged(full / "h200-r2-load-rerun.json.gz", full / sglang)["standalone-d16"][16]
    assert slow.verdict.outcome == Outcome.REGRESSED and slow.verdict.provisional
    assert slow.cause == "host", slow.message
    assert "verify steps/s -6.1%; the GPU's own work per round (every phase but extend) moved " \
        "+0.001 s of the round's +0.18" in slow.cause_text  # fmt: skip
    fast = load_judged(gc / "h200-bl-load-rerun.json.gz", gc / sglang)["baseline"][64]
    assert fast.verdict.outcome == Outcome.IMPROVED and fast.cause == "host", fast.message


def test_h200_load_gpu_work_finds_the_slowdown_and_flags_no_rerun() -> None:
    """The same H200 runs judged on the GPU's own work per round (three stored boots a side):
    the injected verify slowdown REGRESSED at 16 and 64 clients and UNCHANGED at 1 and 4, with
    an MDE under 1%; the six rerun boots, among them those the host slowed or sped up, flagged
    at no level."""
    gc, full = RUNS / "load-gc", RUNS / "load-full"
    sglang = Path("baselines") / "gpu-nvidia-h200-x1" / "sglang"
    inject = load_judged(gc / "h200-load-inject.json.gz", gc / sglang)["standalone-d16"]
    outcomes = {c: lv.work.outcome for c, lv in inject.items()}
    assert outcomes == {1: Outcome.UNCHANGED, 4: Outcome.UNCHANGED, 16: Outcome.REGRESSED,
                        64: Outcome.REGRESSED}  # fmt: skip
    assert inject[16].work.ratio == pytest.approx(0.840, abs=0.002)
    assert all(lv.work.mde < 0.01 for lv in inject.values())
    reruns = [(gc, "h200-bl-load-rerun"), (gc, "h200-sd-load-rerun"), (full, "h200-load-rerun"),
              (full, "h200-r2-load-rerun")]  # fmt: skip
    for where, name in reruns:
        for config, levels in load_judged(where / f"{name}.json.gz", where / sglang).items():
            for clients, level in levels.items():
                assert level.work.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), (
                    name, config, clients, level.message)  # fmt: skip


CURVES = RUNS / "load-curves"  # the four configs' curves, one boot each, stored


def curves_ab() -> dict[str, Any]:
    """That run's speculative configs A/B against `baseline` at every level, Holm across them
    all: config -> load judgement."""
    from pytest_specdec.core.results import load_results
    from pytest_specdec.verdict.load import adjust_load, judge_load_reference

    doc, policy = load_results(CURVES / "h200-load.json.gz"), VerdictPolicy()
    by_name = {c["name"]: c for c in doc["configs"]}
    judged = {
        name: judge_load_reference(by_name[name], by_name["baseline"], policy)
        for name in ("standalone-d16", "dflash-b16", "eagle3")
    }
    adjust_load(list(judged.values()), policy)
    return judged


def test_h200_load_curves_of_the_four_configs() -> None:
    """SGLang 0.5.17 on an H200 (docs/gpu-run.md, "A thirteenth H200"): each speculative config
    A/B against `baseline` at 1, 4, 16 and 64 clients. `standalone-d16` and `dflash-b16` (the
    distilled drafter) pay up to 16 clients and stop paying at about 47.8 and 19.4 clients;
    `eagle3` (a head from a seed, accept 1.01) pays at no level."""
    judged = curves_ab()
    crossings = {}
    for name, load in judged.items():
        assert load.crossover is not None, name
        crossings[name] = (load.crossover.where, load.crossover.estimate)
    assert crossings["standalone-d16"][0] == "at"
    assert crossings["standalone-d16"][1] == pytest.approx(47.8, abs=0.1)
    assert crossings["dflash-b16"][0] == "at"
    assert crossings["dflash-b16"][1] == pytest.approx(19.4, abs=0.1)
    assert crossings["eagle3"] == ("below", None)
    dflash = judged["dflash-b16"].levels
    assert dflash[1].verdict.ratio == pytest.approx(1.914, abs=0.002)
    assert dflash[64].verdict.outcome == Outcome.REGRESSED


def test_h200_load_ab_past_the_crossover_fails_unless_the_levels_are_left_out_of_the_gate() -> None:
    """The same A/B: a level where a speculative config is slower than `baseline` fails the run
    as any A/B verdict does; ``--specdec-fail-on tok-regressed,accept-regressed`` leaves the
    levels to the report."""
    from pytest_specdec.core.values import fail_on
    from pytest_specdec.verdict.gate import failures
    from pytest_specdec.verdict.judge import Judgement

    judged = [Judgement(name, "judged", "", "reference baseline", load=load)
              for name, load in curves_ab().items()]  # fmt: skip
    failed = failures(judged, fail_on("regressed"))
    assert [m.split(":")[0] for m in failed] == [
        "dflash-b16 at 64 clients", "eagle3 at 1 client", "eagle3 at 4 clients",
        "eagle3 at 16 clients", "eagle3 at 64 clients",
    ]  # fmt: skip
    assert failures(judged, fail_on("tok-regressed,accept-regressed")) == []


def test_h200_fifth_load_boot_against_the_four_stored_before_it() -> None:
    """The same run's `baseline` and `standalone-d16` boots judged against the four boots stored
    before them (provisional: fewer than five). Throughput flags `baseline` at 16 clients
    (0.960x), and its cause reads host; the GPU's own work per round flags no level."""
    from pytest_specdec.core.results import load_results
    from pytest_specdec.verdict.baselines import load_baseline
    from pytest_specdec.verdict.load import adjust_load, judge_load_history

    doc, policy = load_results(CURVES / "h200-load.json.gz"), VerdictPolicy()
    stored = CURVES / "baselines" / "gpu-nvidia-h200-x1" / "sglang"
    judged = {}
    for config in doc["configs"]:
        if config["name"] not in ("baseline", "standalone-d16"):
            continue
        baseline = load_baseline(stored / f"{config['name']}--mb-smollm2-7-4b-s0-1-seed1-hf.json")
        assert baseline is not None and len(baseline.sessions) == 5
        before = replace(baseline, sessions=baseline.sessions[:4])
        judged[config["name"]] = judge_load_history(config, before, policy)
    adjust_load(list(judged.values()), policy)
    flagged = {
        (name, clients): (level.verdict.outcome, level.cause)
        for name, load in judged.items()
        for clients, level in load.levels.items()
        if level.verdict.outcome in (Outcome.REGRESSED, Outcome.IMPROVED)
    }
    assert flagged == {("baseline", 16): (Outcome.REGRESSED, "host")}
    for name, load in judged.items():
        for clients, level in load.levels.items():
            assert level.verdict.provisional
            assert level.work is not None
            assert level.work.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), (name, clients)
