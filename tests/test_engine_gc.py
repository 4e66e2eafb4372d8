"""Garbage collection kept out of the measurements: the harness's own collector held off while
it measures, the engine's frozen after the warm-up where the suite asks (SGLang's /freeze_gc,
whose answers are the protocol edge cases faked here), and the engine's long collections named
per load level from its log."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests_support import FakeSGLang

from pytest_specdec.core.configs import ConfigError, Registry, preset_configs
from pytest_specdec.core.suitefile import EngineSettings, SuiteSettings, load_suite_settings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.measure.levels import (
    LoadLimits,
    gc_note,
    observed_notes,
    summarize_level,
    summarize_round,
)
from pytest_specdec.measure.quiet import collector_held
from pytest_specdec.report.load import _engine_cell, level_notes, limits_line
from pytest_specdec.verdict.baselines import key_for


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _garbage() -> weakref.ref[_Cycle]:
    return weakref.ref(_Cycle())


def test_the_harness_holds_its_collector_off_while_it_measures() -> None:
    with collector_held():
        assert not gc.isenabled()
        inside = _garbage()
        for _ in range(50_000):  # far past the threshold that would start a collection
            _Cycle()
        assert inside() is not None  # no collection ran within the window
    assert gc.isenabled()
    gc.collect()
    assert inside() is None  # the window's garbage is freed afterwards


def test_a_collector_held_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collector_held():
            assert not gc.isenabled()
        assert not gc.isenabled()  # what the caller chose is kept
    finally:
        gc.enable()


def _runner(tmp_path: Path, fake: FakeSGLang, freeze: bool, warmup: bool = True) -> Runner:
    settings = RunSettings(
        server_url="http://test", engine="sglang", runs=1, warmup=warmup, rounds=2,
        results_path=tmp_path / "r.json", concurrency=(2,),
    )  # fmt: skip
    suite = SuiteSettings(engines={"sglang": EngineSettings(freeze_gc=freeze)})
    return Runner(settings, Registry(preset_configs()), suite, load_workload("seed"),
                  transport=httpx.MockTransport(fake))  # fmt: skip


def _document(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "r.json").read_text())  # type: ignore[no-any-return]


def test_the_engine_is_frozen_after_the_warm_up_and_measured_with_the_harness_held(
    tmp_path: Path,
) -> None:
    fake = FakeSGLang()
    runner = _runner(tmp_path, fake, freeze=True)
    try:
        server = runner.boot(runner.configs[0])
        prompts = runner.workload.prompts
        runner.measure(server, prompts[0])
        runner.measure(server, prompts[1])  # frozen once per server, not per prompt
        runner.load_level(server, 2)
    finally:
        runner.close()
    chats = [i for i, p in enumerate(fake.paths) if p == "/v1/chat/completions"]
    (freeze,) = [i for i, p in enumerate(fake.paths) if p == "/freeze_gc"]
    assert sum(1 for i in chats if i < freeze) == len(prompts)  # the warm-up, then the freeze
    assert chats[-1] > freeze
    # every request, warm-up, measured or of a load round, went out with the collector held
    assert fake.collector_on and not any(fake.collector_on)
    assert gc.isenabled()
    config = _document(tmp_path)["configs"][0]
    assert config["extra"]["engine_gc"] == "frozen after the warm-up"
    assert key_for(_document(tmp_path), config)["protocol"] == {"engine_gc": "frozen"}
    assert "the engine's garbage collector frozen after the warm-up (freeze_gc)" in (
        limits_line("baseline", config)
    )


def test_without_freeze_gc_nothing_is_frozen_and_the_key_is_the_old_one(tmp_path: Path) -> None:
    fake = FakeSGLang()
    runner = _runner(tmp_path, fake, freeze=False, warmup=False)
    try:
        server = runner.boot(runner.configs[0])
        runner.measure(server, runner.workload.prompts[0])
    finally:
        runner.close()
    assert "/freeze_gc" not in fake.paths
    config = _document(tmp_path)["configs"][0]
    assert "engine_gc" not in config["extra"]
    assert key_for(_document(tmp_path), config)["protocol"] is None  # stored keys still match


def test_a_freeze_the_engine_refuses_fails_the_config_with_the_fix(tmp_path: Path) -> None:
    fake = FakeSGLang(freeze_status=404)
    runner = _runner(tmp_path, fake, freeze=True, warmup=False)
    try:
        server = runner.boot(runner.configs[0])
        with pytest.raises(LaunchError) as caught:
            runner.measure(server, runner.workload.prompts[0])
        with pytest.raises(LaunchError):  # the next prompt: refused again, never asked again
            runner.measure(server, runner.workload.prompts[1])
    finally:
        runner.close()
    message = str(caught.value)
    assert fake.paths.count("/freeze_gc") == 1
    assert "/freeze_gc answered HTTP 404" in message
    assert "drop freeze_gc from [engines.sglang]" in message
    assert "/v1/chat/completions" not in fake.paths  # nothing measured unfrozen
    config = _document(tmp_path)["configs"][0]
    assert "freeze_gc" in config["error"] and "engine_gc" not in config["extra"]


def test_an_engine_without_a_collector_to_freeze_is_refused_before_it_boots(
    tmp_path: Path,
) -> None:
    settings = RunSettings(engine="llamacpp", runs=1, results_path=tmp_path / "r.json",
                           config_names=("baseline",))  # fmt: skip
    suite = SuiteSettings(engines={"llamacpp": EngineSettings(freeze_gc=True)})
    runner = Runner(settings, Registry(preset_configs()), suite, load_workload("seed"))
    try:
        with pytest.raises(ConfigError, match=r"\[engines.llamacpp\] freeze_gc = true, but the "
                           r"llamacpp adapter cannot freeze"):  # fmt: skip
            runner.boot(runner.configs[0])
    finally:
        runner.close()


@pytest.mark.parametrize(
    ("engine", "args", "extra", "named"),
    [("llamacpp", ("--port", "9000"), (), "--port"),
     ("llamacpp", (), ("-m", "/other.gguf"), "-m"),
     ("sglang", ("--model-path=org/other",), (), "--model-path"),
     ("vllm", ("--host", "0.0.0.0"), (), "--host")],
)  # fmt: skip
def test_flags_the_plugin_sets_itself_are_refused_before_a_boot(
    tmp_path: Path, engine: str, args: tuple[str, ...], extra: tuple[str, ...], named: str
) -> None:
    """A port, host or target model in a config's args or the engine's: the engine would
    take the later one, listening where no probe looks or loading a model the record does
    not name. Refused at the plan, naming the flag and the fix."""
    from pytest_specdec.core.configs import SpecConfig

    mine = SpecConfig(name="mine", engine=engine, args=args)
    registry = Registry([*preset_configs(), mine])
    settings = RunSettings(engine=engine, runs=1, results_path=tmp_path / "r.json",
                           config_names=("mine",))  # fmt: skip
    suite = SuiteSettings(engines={engine: EngineSettings(extra_args=extra)})
    runner = Runner(settings, registry, suite, load_workload("seed"))
    try:
        said = rf"config mine: {named} given in its args or the engine's, .*drop them, and name"
        with pytest.raises(ConfigError, match=said + rf" the target in \[models.{engine}\]"):
            runner.planner.plan(runner.configs[0])
    finally:
        runner.close()


def test_the_suite_file_takes_freeze_gc_as_a_boolean(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text("[engines.sglang]\nfreeze_gc = true\n")
    assert load_suite_settings(suite).engine_settings("sglang").freeze_gc is True
    assert load_suite_settings(suite).engine_settings("vllm").freeze_gc is False
    suite.write_text('[engines.sglang]\nfreeze_gc = "yes"\n')
    with pytest.raises(ConfigError, match=r"freeze_gc = 'yes'; give true or false"):
        load_suite_settings(suite)


SGLANG_GC_LOG = """\
[2026-12-03 23:40:11] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.4521s | \
# Objects: gen0=12, gen1=0, gen2=1563204 | This may cause latency jitter. Consider calling the \
freeze_gc API after sending a few warmup requests.
[2026-12-03 23:40:12] Decode batch, #running-req: 64, #token: 9100, token usage: 0.05, \
cuda graph: True, gen throughput (token/s): 8100.50, #queue-req: 0
[2026-12-03 23:40:19] LONG GARBAGE COLLECTION DETECTED | Generation 1 | Duration: 0.0612s | \
# Objects: gen0=3, gen1=0, gen2=1563900 | This may cause latency jitter.
"""


def test_the_engines_long_collections_are_read_from_its_log_and_named_per_level() -> None:
    facts = SGLangEngine().log_facts(SGLANG_GC_LOG)
    assert facts["engine_gc_pauses"] == 2
    assert facts["engine_gc_max_s"] == 0.4521
    assert facts["engine_gc_s"] == pytest.approx(0.5133)
    assert "engine_gc_pauses" not in SGLangEngine().log_facts(SGLANG_GC_LOG.split("\n")[3])
    base = summarize_round(64, 1, 1, [], 5.0)
    rounds = [replace(base, engine=facts), replace(base, round=2, engine={})]
    level = summarize_level(rounds)
    assert (level.engine_gc_pauses, level.engine_gc_max_s) == (2, 0.4521)
    said = (
        "engine paused to collect garbage: 2 long collections, the longest 452 ms "
        "(the engine's log)"
    )
    assert gc_note(level) == said and observed_notes(level) == []
    assert _engine_cell(level, LoadLimits()) == "long GC x2"
    quiet = summarize_level([replace(base, engine={})])
    assert quiet.engine_gc_pauses == 0 and gc_note(quiet) is None
    # in the report the collections come beside what the settings say of the level
    config = {
        "extra": {
            "load": [r.to_dict() for r in rounds],
            "load_limits": {"slots": 32, "slots_flag": "--max-running-requests"},
        }
    }
    assert level_notes("c", config) == [
        "c at 64 clients: queued by its settings: 64 clients, 32 requests at once "
        "(--max-running-requests 32)",
        f"c at 64 clients: {said}",
    ]


def test_a_bisect_candidate_whose_engine_refuses_the_freeze_is_a_failed_boot(
    tmp_path: Path,
) -> None:
    """specdec bisect: a candidate booted but not made ready (its SGLang refused /freeze_gc)
    is marked as failing to boot, as one that did not start, never a crash of the search."""
    from pytest_specdec.bisect.live import LiveMeasurer, Setup
    from pytest_specdec.bisect.step import BootFailed
    from pytest_specdec.driver.steps import Steps

    settings = RunSettings(server_url="http://test", engine="sglang", runs=1, warmup=False,
                           results_path=None)  # fmt: skip
    suite = SuiteSettings(engines={"sglang": EngineSettings(freeze_gc=True)})
    workload = load_workload("seed")
    registry = Registry(preset_configs())
    steps = Steps(settings, registry, suite, workload,
                  transport=httpx.MockTransport(FakeSGLang(freeze_status=404)))  # fmt: skip
    measurer = LiveMeasurer(Setup(settings, registry, suite, workload, tmp_path), {}, None)  # type: ignore[arg-type]
    measurer.steps = {"c1": steps}
    try:
        with pytest.raises(BootFailed, match="/freeze_gc answered HTTP 404"):
            measurer.session("c1")
    finally:
        steps.close()
