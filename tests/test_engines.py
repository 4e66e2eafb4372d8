"""Unit tests for the engine adapters: the command line of every preset, installation checks,
engine lookup, Prometheus parsing and accept length from counter deltas."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import stat
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pytest_specdec.core.configs import (
    PRESET_ENGINES,
    Registry,
    SpecConfig,
    load_registry,
    parse_config,
    preset_configs,
)
from pytest_specdec.core.engine_table import ENGINE_TABLE, EngineTableError
from pytest_specdec.core.suitefile import EngineSettings, SuiteSettings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings
from pytest_specdec.engines import (
    Engine,
    EngineNotInstalled,
    llamacpp,
    make_engine,
    sglang,
    vllm,
)
from pytest_specdec.engines.base import BootContext, LaunchSpec, parse_prometheus, redact
from pytest_specdec.engines.llamacpp import LlamaCppEngine
from pytest_specdec.engines.openai import OpenAIEngine
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.engines.vllm import VLLMEngine

MODEL = "/models/target model.gguf"
DRAFT = "/models/draft.gguf"
HOST = "127.0.0.1"
PORT = 18123
API_KEY = "sk-test-4711-secret"
EXTRA_ARGS = ("-t", "2")
SUITE_ENV = {"SUITE_ONLY": "1", "SHARED": "suite"}
LLAMA_BIN = "/nonexistent/llama.cpp/bin/llama-server"
SGLANG_PY = "/nonexistent/sglang-venv/bin/python"
VLLM_BIN = "/nonexistent/vllm-venv/bin/vllm"
EVIL = "x; rm -rf /"

BASE_SETTINGS = EngineSettings(extra_args=EXTRA_ARGS, env=SUITE_ENV)
SETTINGS = {
    "llamacpp": replace(BASE_SETTINGS, binary=LLAMA_BIN),
    "sglang": replace(BASE_SETTINGS, python=SGLANG_PY),
    "vllm": replace(BASE_SETTINGS, binary=VLLM_BIN),
}

PRESETS = preset_configs()
REGISTRY = Registry(PRESETS)
UPSTREAM_SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH"}


def presets_of(engine: str) -> list[SpecConfig]:
    return [c for c in PRESETS if c.engine == engine]


def preset_params(engine: str) -> list[object]:
    return [pytest.param(c, id=c.name) for c in presets_of(engine)]


def context(cfg: SpecConfig, api_key: str | None = API_KEY, model: str = MODEL) -> BootContext:
    return BootContext(cfg, model, DRAFT if cfg.draft else None, HOST, PORT, api_key)


def launch(cfg: SpecConfig, api_key: str | None = API_KEY, model: str = MODEL) -> LaunchSpec:
    engine = make_engine(cfg.engine, SETTINGS[cfg.engine])
    return engine.build_command(context(cfg, api_key, model))


def value_after(argv: Sequence[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def draft_part(cfg: SpecConfig, flag: str) -> list[str]:
    return [flag, DRAFT] if cfg.draft else []


def executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- the preset set ---------------------------------------------------------------------------


def test_presets_are_exactly_the_shipped_ones() -> None:
    names = {e: sorted(c.name for c in presets_of(e)) for e in PRESET_ENGINES}
    assert names == {
        "llamacpp": ["baseline", "draft-d16", "draft-d4", "ngram"],
        "sglang": [
            "baseline",
            "ddtree-b15",
            "ddtree-b16",
            "dflash-b16",
            "dflash-b16-triton",
            "eagle3",
            "ngram",
            "standalone-chain-b16",
            "standalone-d16",
            "standalone-d4",
            "standalone-tree-b15",
        ],
        "vllm": ["baseline", "dflash-b16", "eagle3", "ngram"],
    }
    assert len({c.qualified_name for c in PRESETS}) == len(PRESETS)
    assert all(c.source == f"preset {c.engine}.toml" for c in PRESETS)


@pytest.mark.parametrize("engine", PRESET_ENGINES)
def test_baseline_preset_does_not_speculate(engine: str) -> None:
    cfg = REGISTRY.resolve("baseline", engine)
    assert (cfg.args, dict(cfg.env), cfg.draft, cfg.speculative_config) == ((), {}, None, None)
    assert cfg.speculative is False


# --- llama.cpp --------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", preset_params("llamacpp"))
def test_llamacpp_command(cfg: SpecConfig) -> None:
    spec = launch(cfg)
    head = [LLAMA_BIN, "-m", MODEL, "--host", HOST, "--port", str(PORT), "--metrics"]
    tail = [*EXTRA_ARGS, *cfg.args]
    assert spec.argv == [*head, *draft_part(cfg, "-md"), *tail]
    assert ("-md" in spec.argv) == (cfg.draft is not None)
    assert spec.env == {**SUITE_ENV, **cfg.env, "LLAMA_API_KEY": API_KEY}  # not on the argv


@pytest.mark.parametrize("cfg", preset_params("llamacpp"))
def test_llamacpp_presets_use_current_speculation_flags(cfg: SpecConfig) -> None:
    assert not {"--draft-max", "--draft-min", "--draft"} & set(cfg.args)
    if cfg.name == "baseline":
        assert "--spec-type" not in cfg.args
        return
    spec_type = value_after(cfg.args, "--spec-type")
    # -md alone loads the draft but does not speculate: a draft needs a draft-* spec type.
    assert spec_type.startswith("draft-") == (cfg.draft is not None)


def test_llamacpp_draft_preset_exact_argv() -> None:
    spec = launch(REGISTRY.resolve("draft-d16", "llamacpp"))
    assert spec.argv == [
        LLAMA_BIN,
        "-m",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        "18123",
        "--metrics",
        "-md",
        DRAFT,
        "-t",
        "2",
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "16",
    ]


def test_llamacpp_uses_an_executable_binary_given_in_settings(tmp_path: Path) -> None:
    binary = executable(tmp_path / "llama-server")
    engine = LlamaCppEngine(EngineSettings(binary=str(binary)))
    engine.check_installed()
    spec = engine.build_command(context(REGISTRY.resolve("baseline", "llamacpp")))
    assert spec.argv[0] == str(binary)


# --- SGLang -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", preset_params("sglang"))
def test_sglang_command(cfg: SpecConfig) -> None:
    spec = launch(cfg)
    head = [SGLANG_PY, "-m", "sglang.launch_server", "--model-path", MODEL]
    head += ["--host", HOST, "--port", str(PORT), "--enable-metrics"]
    tail = [*EXTRA_ARGS, *cfg.args, "--api-key", API_KEY]
    assert spec.argv == [*head, *draft_part(cfg, "--speculative-draft-model-path"), *tail]
    assert ("--speculative-draft-model-path" in spec.argv) == (cfg.draft is not None)
    assert spec.env == {**SUITE_ENV, **cfg.env}


@pytest.mark.parametrize(
    ("name", "budget", "topk"), [("ddtree-b15", 15, 8), ("ddtree-b16", 16, 16)]
)
def test_sglang_ddtree_presets(name: str, budget: int, topk: int) -> None:
    cfg = REGISTRY.resolve(name, "sglang")
    spec = launch(cfg)
    assert cfg.interface == "sglang-pr-29907"
    assert "#29907" in cfg.description
    assert cfg.draft == "dflash"
    assert value_after(spec.argv, "--speculative-draft-model-path") == DRAFT
    assert value_after(spec.argv, "--speculative-algorithm") == "DDTREE"
    assert value_after(spec.argv, "--speculative-ddtree-budget") == str(budget)
    assert spec.env["SGLANG_DDTREE_MAX_TOPK"] == str(topk)
    # The pull request's implementation needs triton attention, page size 1 and overlap off.
    assert value_after(spec.argv, "--attention-backend") == "triton"
    assert value_after(spec.argv, "--page-size") == "1"
    assert "--disable-overlap-schedule" in spec.argv


@pytest.mark.parametrize(
    "cfg",
    [pytest.param(c, id=c.name) for c in presets_of("sglang") if not c.name.startswith("ddtree-")],
)
def test_sglang_non_ddtree_presets_assume_upstream(cfg: SpecConfig) -> None:
    assert cfg.interface == "upstream"
    assert not any("ddtree" in a.lower() for a in cfg.args)
    assert not any(k.startswith("SGLANG_DDTREE") for k in cfg.env)
    if cfg.args:
        assert value_after(cfg.args, "--speculative-algorithm") in UPSTREAM_SGLANG_ALGORITHMS


def test_sglang_dflash_block_size_equals_draft_tokens() -> None:
    cfg = REGISTRY.resolve("dflash-b16", "sglang")
    assert value_after(cfg.args, "--speculative-dflash-block-size") == "16"
    assert value_after(cfg.args, "--speculative-num-draft-tokens") == "16"


# --- vLLM -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", preset_params("vllm"))
def test_vllm_command(cfg: SpecConfig) -> None:
    spec = launch(cfg)
    head = [VLLM_BIN, "serve", MODEL, "--host", HOST, "--port", str(PORT), *EXTRA_ARGS]
    assert spec.argv[: len(head)] == head
    assert "--api-key" not in spec.argv
    assert spec.env == {**SUITE_ENV, **cfg.env, "VLLM_API_KEY": API_KEY}
    if cfg.speculative_config is None:
        assert "--speculative-config" not in spec.argv
        assert cfg.draft is None
        return
    data = json.loads(value_after(spec.argv, "--speculative-config"))
    assert data["method"] == cfg.speculative_config["method"]
    assert isinstance(data["num_speculative_tokens"], int)
    assert data["num_speculative_tokens"] == cfg.speculative_config["num_speculative_tokens"]
    assert ("model" in data) == (cfg.draft is not None)
    if cfg.draft:
        assert data["model"] == DRAFT
    expected = {**cfg.speculative_config, **({"model": DRAFT} if cfg.draft else {})}
    assert data == expected


def test_vllm_dflash_matches_the_documented_shape() -> None:
    spec = launch(REGISTRY.resolve("dflash-b16", "vllm"))
    data = json.loads(value_after(spec.argv, "--speculative-config"))
    assert data == {"method": "dflash", "model": DRAFT, "num_speculative_tokens": 15}


def test_vllm_ngram_has_lookup_window_and_no_model() -> None:
    spec = launch(REGISTRY.resolve("ngram", "vllm"))
    data = json.loads(value_after(spec.argv, "--speculative-config"))
    assert data == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }


def test_vllm_falls_back_to_the_configured_binary_name() -> None:
    cfg = REGISTRY.resolve("baseline", "vllm")
    spec = VLLMEngine(EngineSettings(binary=VLLM_BIN)).build_command(context(cfg, None))
    assert spec.argv == [VLLM_BIN, "serve", MODEL, "--host", HOST, "--port", str(PORT)]


# --- all engines: secrets and literal arguments -----------------------------------------------


@pytest.mark.parametrize("cfg", preset_params("sglang"))
def test_sglang_key_goes_in_a_private_config_file_not_the_argv(
    cfg: SpecConfig, tmp_path: Path
) -> None:
    engine = make_engine("sglang", SETTINGS["sglang"])
    spec = engine.build_command(replace(context(cfg), secret_dir=tmp_path))
    path = Path(value_after(spec.argv, "--config"))
    assert path.parent == tmp_path and "--api-key" not in spec.argv
    assert not any(API_KEY in a for a in spec.argv) and API_KEY not in json.dumps(spec.env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(path.read_text()) == {"api-key": API_KEY}
    assert spec.secrets == (API_KEY,) and spec.redacted_argv() == spec.argv


def test_runner_keeps_key_files_in_a_private_folder_removed_at_close(tmp_path: Path) -> None:
    options = RunSettings(results_path=tmp_path / "r.json", api_key="k", log_dir=tmp_path)
    runner = Runner(options, REGISTRY, SuiteSettings(), load_workload("seed"))
    folder = runner.planner.secret_dir()
    assert folder is not None and folder == runner.planner.secret_dir()  # one per run
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (folder / "sglang-1.yaml").write_text("api-key: k\n")
    runner.close()
    assert not folder.exists()
    keyless = Runner(
        replace(options, api_key=None), REGISTRY, SuiteSettings(), load_workload("seed")
    )
    assert keyless.planner.secret_dir() is None
    keyless.close()


def test_sglang_key_stays_on_the_argv_when_the_config_brings_its_own_file(
    tmp_path: Path,
) -> None:
    cfg = parse_config("own", {"engine": "sglang", "args": ["--config", "mine.yaml"]}, "f")
    engine = make_engine("sglang", SETTINGS["sglang"])
    spec = engine.build_command(replace(context(cfg), secret_dir=tmp_path))
    assert value_after(spec.argv, "--config") == "mine.yaml"  # SGLang takes one --config
    assert value_after(spec.redacted_argv(), "--api-key") == "***"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.qualified_name) for c in PRESETS])
def test_api_key_is_passed_but_redacted(cfg: SpecConfig) -> None:
    spec = launch(cfg)
    in_env = {"llamacpp": "LLAMA_API_KEY", "vllm": "VLLM_API_KEY"}.get(cfg.engine)
    if in_env:  # the environment is private to the user; a command line is not
        assert spec.env[in_env] == API_KEY and "--api-key" not in spec.argv
    else:
        assert value_after(spec.argv, "--api-key") == API_KEY
        assert value_after(spec.redacted_argv(), "--api-key") == "***"
    assert spec.secrets == (API_KEY,)
    redacted = spec.redacted_argv()
    assert not any(API_KEY in a for a in redacted)
    assert len(redacted) == len(spec.argv)
    assert API_KEY not in json.dumps(spec.redacted_env())


def test_secret_looking_env_values_are_recorded_hidden_and_settings_kept() -> None:
    """A token in a config's or a suite's env is recorded as ***, in the launch record and in
    the config's record alike (its hash still holds it); a setting whose name merely contains
    "tokens" keeps its value."""
    env = {"HF_TOKEN": "hf_abc123", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "0"}
    spec = LaunchSpec(["server", "--speculative-num-draft-tokens", "4"], env)
    assert spec.redacted_env() == {**env, "HF_TOKEN": "***"}
    cfg = SpecConfig(name="mine", engine="sglang", env=dict(env))
    recorded = cfg.to_dict()
    assert recorded["env"] == {**env, "HF_TOKEN": "***"} and "hf_abc123" not in json.dumps(recorded)
    assert recorded["sha256"] == cfg.sha256 != SpecConfig(name="mine", engine="sglang").sha256


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.qualified_name) for c in PRESETS])
def test_no_api_key_no_flag(cfg: SpecConfig) -> None:
    spec = launch(cfg, api_key=None)
    assert "--api-key" not in spec.argv
    assert spec.secrets == ()
    assert spec.redacted_argv() == spec.argv


@pytest.mark.parametrize("engine", ["llamacpp", "sglang", "vllm"])
def test_config_env_overrides_suite_env(engine: str) -> None:
    cfg = SpecConfig(name="env", engine=engine, env={"SHARED": "config", "OWN": "x"})
    spec = launch(cfg, api_key=None)
    assert spec.env == {"SUITE_ONLY": "1", "SHARED": "config", "OWN": "x"}


def test_redact_replaces_every_occurrence_and_ignores_empty_secrets() -> None:
    assert redact("a=KEY b=KEY", ["KEY", ""]) == "a=*** b=***"
    assert redact("nothing", []) == "nothing"


def test_redacted_env_hides_secret_values() -> None:
    spec = LaunchSpec(argv=["x"], env={"TOKEN": "abc", "OTHER": "1"}, secrets=("abc",))
    assert spec.redacted_env() == {"TOKEN": "***", "OTHER": "1"}


@pytest.mark.parametrize("engine", ["llamacpp", "sglang"])
def test_shell_metacharacters_stay_one_literal_argument(engine: str, tmp_path: Path) -> None:
    path = tmp_path / "specdec.toml"
    path.write_text(
        f"""
        [configs.evil]
        engine = "{engine}"
        args = ["--chat-template", "{EVIL}", "--alias", "$(touch /tmp/pwned)"]
        env = {{ EVIL = "`reboot`; {EVIL}" }}
        """,
        encoding="utf-8",
    )
    cfg = load_registry([path]).resolve("evil", engine)
    evil_model = f"/models/a b{EVIL}.gguf"
    spec = launch(cfg, model=evil_model)
    assert all(isinstance(a, str) for a in spec.argv)
    assert value_after(spec.argv, "--chat-template") == EVIL
    assert value_after(spec.argv, "--alias") == "$(touch /tmp/pwned)"
    assert spec.argv.count(evil_model) == 1
    assert "rm" not in spec.argv and "-rf" not in spec.argv
    assert spec.env["EVIL"] == f"`reboot`; {EVIL}"


def test_vllm_speculative_config_with_metacharacters_is_one_json_argument() -> None:
    cfg = SpecConfig(
        name="evil",
        engine="vllm",
        draft="draft",
        speculative_config={"method": EVIL, "num_speculative_tokens": 2},
    )
    spec = launch(cfg, api_key=None)
    after = spec.argv[spec.argv.index("--speculative-config") + 1 :]
    assert len(after) == 1
    assert json.loads(after[0]) == {"method": EVIL, "model": DRAFT, "num_speculative_tokens": 2}


# --- engine lookup ----------------------------------------------------------------------------


def test_make_engine_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown engine 'tgi'; installed: ") as info:
        make_engine("tgi")
    for name in ("llamacpp", "sglang", "vllm", "openai"):
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("name", "cls", "readiness"),
    [
        ("llamacpp", LlamaCppEngine, "/health"),
        ("sglang", SGLangEngine, "/health_generate"),
        ("vllm", VLLMEngine, "/health"),
        ("openai", OpenAIEngine, "/v1/models"),
    ],
)
def test_make_engine_known_names(name: str, cls: type, readiness: str) -> None:
    settings = EngineSettings(binary="/x", extra_args=("-a",))
    engine = make_engine(name, settings)
    assert type(engine) is cls
    assert isinstance(engine, Engine)
    assert engine.name == name
    assert engine.readiness_path == readiness
    assert engine.settings is settings
    assert make_engine(name).settings == EngineSettings()
    assert ENGINE_TABLE.factory(name) is cls
    assert "entry point pytest_specdec.engines." in ENGINE_TABLE.source(name)


def test_engine_table_errors_name_the_value_and_the_fix() -> None:
    with pytest.raises(EngineTableError, match=r"unknown engine 'trt'; installed: .*llamacpp"):
        make_engine("trt")
    with pytest.raises(EngineTableError, match="registered twice: by entry point"):
        ENGINE_TABLE.add("llamacpp", OpenAIEngine, "pytest plugin x")
    with pytest.raises(EngineTableError, match="use lowercase letters"):
        ENGINE_TABLE.add("Bad Name", OpenAIEngine, "pytest plugin x")
    assert "openai" not in ENGINE_TABLE.config_engines()  # it measures a foreign server


def test_openai_engine_refuses_to_boot() -> None:
    cfg = SpecConfig(name="x", engine="openai")
    with pytest.raises(EngineNotInstalled, match="--specdec-server-url"):
        OpenAIEngine().build_command(context(cfg))
    OpenAIEngine().check_installed()  # nothing to install for an external server


# --- check_installed --------------------------------------------------------------------------


def test_llamacpp_missing_binary_names_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-llama-server"
    with pytest.raises(EngineNotInstalled) as info:
        LlamaCppEngine(EngineSettings(binary=str(missing))).check_installed()
    message = str(info.value)
    assert str(missing) in message
    assert "./scripts/setup" in message
    assert "llama-server" in message


def test_llamacpp_non_executable_file_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "llama-server"
    plain.write_text("not a program", encoding="utf-8")
    with pytest.raises(EngineNotInstalled, match=r"\(from \[engines.llamacpp\] binary\) is not "
                       "an executable file: point"):  # fmt: skip
        LlamaCppEngine(EngineSettings(binary=str(plain))).check_installed()


def test_llamacpp_a_folder_named_by_the_environment_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder passes an executable check (it can be entered) and failed only at launch with
    "Permission denied"; it is refused before, naming the variable to fix or unset."""
    monkeypatch.setenv(llamacpp.ENV_BINARY, str(tmp_path))
    var = re.escape(f"${llamacpp.ENV_BINARY}")
    said = rf"from {var}\) is not an executable file: point {var} at a built llama-server"
    with pytest.raises(EngineNotInstalled, match=said):
        LlamaCppEngine().check_installed()


def test_llamacpp_nothing_found_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(llamacpp.ENV_BINARY, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    engine = LlamaCppEngine()
    with pytest.raises(EngineNotInstalled) as info:
        engine.check_installed()
    message = str(info.value)
    assert "llama-server not found" in message
    assert f"${llamacpp.ENV_BINARY}" in message
    assert "./scripts/setup" in message
    assert str(tmp_path / "cache" / "llama.cpp") in message
    with pytest.raises(EngineNotInstalled, match=r"\./scripts/setup"):
        engine.build_command(context(REGISTRY.resolve("baseline", "llamacpp")))
    assert engine.version() is None


def test_llamacpp_finds_the_environment_variable_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = executable(tmp_path / "my-llama-server")
    monkeypatch.setenv(llamacpp.ENV_BINARY, str(binary))
    assert llamacpp.find_binary(EngineSettings()) == binary
    LlamaCppEngine().check_installed()


def test_vllm_missing_binary_names_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-vllm"
    with pytest.raises(EngineNotInstalled) as info:
        VLLMEngine(EngineSettings(binary=str(missing))).check_installed()
    message = str(info.value)
    assert str(missing) in message
    assert "pip install vllm" in message
    assert "[engines.vllm] binary" in message
    assert VLLMEngine(EngineSettings(binary=str(missing))).version() is None


def test_vllm_executable_binary_passes(tmp_path: Path) -> None:
    binary = executable(tmp_path / "vllm")
    engine = VLLMEngine(EngineSettings(binary=str(binary)))
    engine.check_installed()
    spec = engine.build_command(context(REGISTRY.resolve("baseline", "vllm"), None))
    assert spec.argv[:3] == [str(binary), "serve", MODEL]


def test_sglang_not_installed_for_this_python_says_to_install_it() -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed in this interpreter")
    with pytest.raises(EngineNotInstalled) as info:
        SGLangEngine(EngineSettings(python=sys.executable)).check_installed()
    message = str(info.value)
    assert sys.executable in message
    assert "pip install 'sglang[all]'" in message
    assert "[engines.sglang] python" in message


def test_sglang_python_that_cannot_run(tmp_path: Path) -> None:
    missing = tmp_path / "no-python"
    with pytest.raises(EngineNotInstalled, match="cannot run") as info:
        SGLangEngine(EngineSettings(python=str(missing))).check_installed()
    assert str(missing) in str(info.value)
    assert "SGLang" in str(info.value)
    assert SGLangEngine(EngineSettings(python=str(missing))).version() is None


def test_sglang_python_whose_probe_succeeds_passes(tmp_path: Path) -> None:
    python = executable(tmp_path / "python")  # exits 0: "sglang found"
    SGLangEngine(EngineSettings(python=str(python))).check_installed()


def test_sglang_defaults_to_the_running_interpreter() -> None:
    spec = SGLangEngine().build_command(context(REGISTRY.resolve("baseline", "sglang"), None))
    assert spec.argv[:3] == [sys.executable, "-m", "sglang.launch_server"]


# --- Prometheus text --------------------------------------------------------------------------

EXPOSITION = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1234

llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 148
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 124
  indented_metric 7
metric_with_timestamp 3.5 1700000000000
sci_metric 1.5e+03
http_requests_total{method="post",path="/v1/a b"} 2
bucket{le="+Inf"} 9
gauge_nan NaN
gauge_inf +Inf
bad_value not-a-number
# a comment that happens to look like: fake_metric 1
{"not": "prometheus"}
"""


def test_parse_prometheus() -> None:
    parsed = parse_prometheus(EXPOSITION)
    nan = parsed.pop("gauge_nan")
    assert math.isnan(nan)
    assert parsed == {
        "llamacpp:tokens_predicted_total": 1234.0,
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}': 148.0,
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"}': 124.0,
        "indented_metric": 7.0,
        "metric_with_timestamp": 3.5,
        "sci_metric": 1500.0,
        'http_requests_total{method="post",path="/v1/a b"}': 2.0,
        'bucket{le="+Inf"}': 9.0,
        "gauge_inf": math.inf,
    }


def test_parse_prometheus_empty_and_comment_only() -> None:
    assert parse_prometheus("") == {}
    assert parse_prometheus("# HELP x y\n# TYPE x counter\n\n") == {}


# --- accept length from counters ----------------------------------------------------------------


def llama_like(prefix: str, drafts: float, accepted: float, drafted: float) -> dict[str, float]:
    return {
        f"{prefix}:spec_decode_num_drafts_total": drafts,
        f"{prefix}:spec_decode_num_accepted_tokens_total": accepted,
        f"{prefix}:spec_decode_num_draft_tokens_total": drafted,
    }


@pytest.mark.parametrize(("engine", "prefix"), [("llamacpp", "llamacpp"), ("vllm", "vllm")])
def test_accept_from_counters_one_plus_accepted_per_draft(engine: str, prefix: str) -> None:
    before = llama_like(prefix, 10, 20, 40)
    after = llama_like(prefix, 14, 26, 56)
    stats = make_engine(engine).accept_from_counters(before, after)
    assert stats == {
        "verify_steps": 4.0,
        "accepted_tokens": 6.0,
        "draft_tokens": 16.0,
        "accept_length": 2.5,
    }


def test_sglang_accept_from_counters_tokens_per_verify_call() -> None:
    before = {sglang.VERIFY_CALLS: 100.0, sglang.GEN_TOKENS: 300.0}
    after = {sglang.VERIFY_CALLS: 110.0, sglang.GEN_TOKENS: 335.0}
    stats = SGLangEngine().accept_from_counters(before, after)
    assert stats == {
        "verify_steps": 10.0,
        "accepted_tokens": None,
        "draft_tokens": None,
        "accept_length": 3.5,
    }


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "sglang", "openai"])
def test_accept_from_counters_missing_counters_give_none(engine: str) -> None:
    eng = make_engine(engine)
    full = {
        **llama_like("llamacpp", 1, 1, 1),
        **llama_like("vllm", 1, 1, 1),
        sglang.VERIFY_CALLS: 1.0,
        sglang.GEN_TOKENS: 1.0,
    }
    assert eng.accept_from_counters({}, {})["accept_length"] is None
    assert eng.accept_from_counters({}, full)["accept_length"] is None
    assert eng.accept_from_counters(full, {})["accept_length"] is None


@pytest.mark.parametrize("engine", ["llamacpp", "vllm"])
def test_accept_from_counters_missing_accepted_counter(engine: str) -> None:
    before = llama_like(engine, 10, 20, 40)
    after = llama_like(engine, 14, 26, 56)
    del after[f"{engine}:spec_decode_num_accepted_tokens_total"]
    stats = make_engine(engine).accept_from_counters(before, after)
    assert stats["accept_length"] is None
    assert stats["accepted_tokens"] is None
    assert stats["verify_steps"] == 4.0


@pytest.mark.parametrize("engine", ["llamacpp", "vllm"])
def test_accept_from_counters_zero_drafts_gives_none(engine: str) -> None:
    same = llama_like(engine, 10, 20, 40)
    stats = make_engine(engine).accept_from_counters(same, dict(same))
    assert stats["accept_length"] is None
    assert stats["verify_steps"] == 0.0


def test_sglang_zero_verify_calls_gives_none() -> None:
    before = {sglang.VERIFY_CALLS: 5.0, sglang.GEN_TOKENS: 10.0}
    after = {sglang.VERIFY_CALLS: 5.0, sglang.GEN_TOKENS: 30.0}
    assert SGLangEngine().accept_from_counters(before, after)["accept_length"] is None


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (llama_like("llamacpp", 0, 0, 0), llama_like("llamacpp", 4, 6, 16), 2.5),
        (llama_like("vllm", 0, 0, 0), llama_like("vllm", 5, 10, 20), 3.0),
        (
            {sglang.VERIFY_CALLS: 0, sglang.GEN_TOKENS: 0},
            {sglang.VERIFY_CALLS: 4, sglang.GEN_TOKENS: 14},
            3.5,
        ),
    ],
    ids=["llamacpp", "vllm", "sglang"],
)
def test_openai_engine_reads_whichever_family_is_exposed(
    before: dict[str, float], after: dict[str, float], expected: float
) -> None:
    assert OpenAIEngine().accept_from_counters(before, after)["accept_length"] == expected


def test_openai_engine_without_spec_counters_reports_none() -> None:
    stats = OpenAIEngine().accept_from_counters({"other_total": 1}, {"other_total": 2})
    assert stats == {
        "accept_length": None,
        "verify_steps": None,
        "accepted_tokens": None,
        "draft_tokens": None,
    }


# vLLM and SGLang label every series (model name, engine index / ranks), so the counters of a
# real /metrics page carry labels; the accept length must still be found.
VLLM_PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="target"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="target"}} {drafted}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="target"}} {accepted}
"""
SGLANG_PAGE = """\
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{model_name="target"}} {verify}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="target"}} {tokens}
"""


def test_vllm_accept_length_from_a_labelled_metrics_page() -> None:
    before = parse_prometheus(VLLM_PAGE.format(drafts=10, drafted=40, accepted=20))
    after = parse_prometheus(VLLM_PAGE.format(drafts=14, drafted=56, accepted=26))
    assert VLLMEngine().accept_from_counters(before, after)["accept_length"] == 2.5


def test_sglang_accept_length_from_a_labelled_metrics_page() -> None:
    before = parse_prometheus(SGLANG_PAGE.format(verify=100, tokens=300))
    after = parse_prometheus(SGLANG_PAGE.format(verify=110, tokens=335))
    assert SGLangEngine().accept_from_counters(before, after)["accept_length"] == 3.5


def test_vllm_speculative_config_json_is_canonical() -> None:
    text = vllm.speculative_config_json({"num_speculative_tokens": 3, "method": "eagle3"}, DRAFT)
    assert text == f'{{"method":"eagle3","model":"{DRAFT}","num_speculative_tokens":3}}'
    assert vllm.speculative_config_json({"method": "ngram"}, None) == '{"method":"ngram"}'
