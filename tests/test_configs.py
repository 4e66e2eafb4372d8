from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pytest_specdec.core.configs import (
    ConfigError,
    Registry,
    load_registry,
    parse_config,
    preset_configs,
    split_names,
)
from pytest_specdec.core.suitefile import (
    load_suite_settings,
    resolve_model_path,
    with_engine_args,
)
from pytest_specdec.core.values import engine_args

REPO = Path(__file__).resolve().parent.parent


def test_presets_cover_every_engine() -> None:
    names = Registry(preset_configs()).names()
    assert {
        "llamacpp:baseline",
        "llamacpp:draft-d16",
        "llamacpp:draft-d4",
        "llamacpp:ngram",
    } <= set(names)
    assert {
        f"sglang:{n}"
        for n in ("baseline", "dflash-b16", "ddtree-b15", "ddtree-b16", "eagle3", "ngram")
    } <= set(names)
    assert {f"vllm:{n}" for n in ("baseline", "dflash-b16", "eagle3", "ngram")} <= set(names)


def test_ddtree_presets_name_their_interface() -> None:
    reg = Registry(preset_configs())
    for name, topk in (("ddtree-b15", "8"), ("ddtree-b16", "16")):
        cfg = reg.resolve(name, "sglang")
        assert cfg.interface == "sglang-pr-29907"
        assert "#29907" in cfg.description
        assert cfg.env["SGLANG_DDTREE_MAX_TOPK"] == topk


def test_resolve_plain_and_qualified() -> None:
    reg = Registry(preset_configs())
    assert reg.resolve("draft-d16", "llamacpp").args[-1] == "16"
    assert reg.resolve("sglang:eagle3", "llamacpp").engine == "sglang"


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="valid names: baseline, draft-d16, draft-d4, ngram"):
        Registry(preset_configs()).resolve("no-such-config", "llamacpp")


def test_user_file_adds_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "extra.toml"
    path.write_text(
        '[configs.mine]\nengine = "llamacpp"\nargs = ["--spec-draft-n-max", 8]\nenv = { A = 1 }\n'
        '[configs.baseline]\nengine = "llamacpp"\nargs = ["-t", "1"]\n'
    )
    reg = load_registry([path])
    mine = reg.resolve("mine", "llamacpp")
    assert mine.args == ("--spec-draft-n-max", "8") and dict(mine.env) == {"A": "1"}
    assert reg.resolve("baseline", "llamacpp").args == ("-t", "1")
    assert reg.resolve("baseline", "sglang").args == ()
    assert mine.source == str(path)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"engine": "tgi"}, "engine = 'tgi' is not one of llamacpp, sglang, vllm"),
        ({"engine": "llamacpp", "args": "--x"}, "'args' must be a list of strings"),
        ({"engine": "llamacpp", "env": ["A"]}, "'env' must be a table"),
        ({"engine": "llamacpp", "argz": []}, "unknown key(s) argz"),
    ],
)
def test_bad_config_names_file_key_and_fix(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("x", table, "my.toml")
    assert "my.toml [configs.x]" in str(info.value)
    assert message in str(info.value)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[configs.x\n")
    with pytest.raises(ConfigError, match=r"bad\.toml is not valid TOML"):
        load_registry([bad])


def test_config_hash_tracks_behaviour_not_source() -> None:
    a = parse_config("x", {"engine": "llamacpp", "args": ["-t", "2"]}, "a.toml")
    b = parse_config("x", {"engine": "llamacpp", "args": ["-t", "2"]}, "b.toml")
    c = parse_config("x", {"engine": "llamacpp", "args": ["-t", "1"]}, "a.toml")
    assert a.sha256 == b.sha256 != c.sha256


def test_flush_is_validated_and_changes_the_hash_only_where_set() -> None:
    plain = parse_config("x", {"engine": "llamacpp"}, "a.toml")
    assert "flush" not in plain.identity()  # the hash baselines were stored under is kept
    runs = parse_config("x", {"engine": "llamacpp", "flush": "run"}, "a.toml")
    prompt = parse_config("x", {"engine": "llamacpp", "flush": "prompt"}, "a.toml")
    assert len({plain.sha256, runs.sha256, prompt.sha256}) == 3
    assert runs.to_dict()["flush"] == "run"
    with pytest.raises(ConfigError, match=r"a\.toml \[configs\.x\]: flush = 'always'; use \"run\""):
        parse_config("x", {"engine": "llamacpp", "flush": "always"}, "a.toml")


def test_sglang_ngram_is_measured_without_recall() -> None:
    """SGLang's NGRAM keeps n-grams of every earlier request; its preset resets them (and
    the prefix cache) before each request (docs/statistics.md)."""
    ngram = Registry(preset_configs()).resolve("ngram", "sglang")
    assert ngram.flush == "run"
    assert Registry(preset_configs()).resolve("ngram", "llamacpp").flush is None


def test_split_names() -> None:
    assert split_names(["a,b", " c ", "a", ""]) == ["a", "b", "c"]


def test_repo_suite_file_loads() -> None:
    suite = load_suite_settings(REPO / "suites" / "specdec.toml")
    assert suite.engine == "llamacpp"
    llama = suite.models_for("llamacpp")
    assert llama.target and llama.target.endswith("Q4_1.gguf") and "~" not in llama.target
    assert llama.draft_for("draft", "llamacpp").endswith("Q4_0.gguf")
    with pytest.raises(ConfigError, match=r"drafts = \{ eagle3 = \"PATH\" \}"):
        llama.draft_for("eagle3", "llamacpp")
    assert suite.engine_settings("llamacpp").extra_args[:2] == ("-np", "1")
    assert load_registry([REPO / "suites" / "specdec.toml"]).resolve("self-draft-d16", "llamacpp")


def test_suite_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[engines.llamacpp]\nstartup_timeout_s = -1\n")
    with pytest.raises(ConfigError, match="startup_timeout_s must be a positive number, got -1"):
        load_suite_settings(path)
    path.write_text("[sweet]\n")
    with pytest.raises(ConfigError, match="unknown table"):
        load_suite_settings(path)
    path.write_text('[suite]\nignore_eos = "yes"\n')
    with pytest.raises(ConfigError, match=r"\[suite\] ignore_eos = 'yes': write true or false"):
        load_suite_settings(path)
    path.write_text("[suite]\nignore_eos = true\n")
    assert load_suite_settings(path).ignore_eos is True
    assert load_suite_settings(REPO / "suites" / "specdec.toml").ignore_eos is False
    path.write_text('[suite]\nscore = "tokens"\n')
    with pytest.raises(ConfigError, match=r"\[suite\] score = 'tokens': write \"e2e\""):
        load_suite_settings(path)
    gpu = load_suite_settings(REPO / "suites" / "specdec-gpu.toml")
    assert (gpu.score, gpu.ignore_eos) == ("decode", True)


def test_model_paths_resolve(tmp_path: Path) -> None:
    assert resolve_model_path("m.gguf", tmp_path) == str(tmp_path / "m.gguf")
    assert resolve_model_path("Qwen/Qwen3-8B", tmp_path) == "Qwen/Qwen3-8B"


def test_a_name_only_one_engine_has_resolves_there_when_no_engine_was_asked() -> None:
    reg = Registry(preset_configs())
    assert reg.resolve("ddtree-b15", "llamacpp", any_engine=True).engine == "sglang"
    assert reg.resolve("draft-d4", "llamacpp", any_engine=True).engine == "llamacpp"
    with pytest.raises(ConfigError, match="unknown spec config 'ddtree-b15' for engine llamacpp"):
        reg.resolve("ddtree-b15", "llamacpp")  # --specdec-engine llamacpp was asked for
    # a name several other engines have is ambiguous: the error names the qualified choices
    with pytest.raises(ConfigError, match=r"exists for engines sglang, vllm.*sglang:eagle3"):
        reg.resolve("eagle3", "llamacpp", any_engine=True)


def test_model_paths_honour_specdec_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "scratch"))
    got = resolve_model_path("$SPECDEC_CACHE/models/m.gguf", None)
    assert got == str(tmp_path / "scratch" / "models" / "m.gguf")
    assert resolve_model_path("${SPECDEC_CACHE}/models/x.hf", None).startswith(str(tmp_path))
    monkeypatch.delenv("SPECDEC_CACHE")  # unset: its default, never a literal "$SPECDEC_CACHE"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model_path("$SPECDEC_CACHE/models/m.gguf", None) == str(
        tmp_path / ".cache" / "pytest-specdec" / "models" / "m.gguf"
    )


def test_gpu_suite_file_defaults_to_sglang() -> None:
    suite = load_suite_settings(REPO / "suites" / "specdec-gpu.toml")
    assert suite.engine == "sglang"
    sglang = suite.models_for("sglang")
    assert sglang.target and sglang.target.endswith("mb-smollm2-7.4b-s0.1-seed1.hf")
    assert {"draft", "far", "dflash", "eagle3"} <= set(sglang.drafts)
    settings = suite.engine_settings("sglang")
    assert settings.api == "native" and "--disable-prefill-cuda-graph" in settings.extra_args
    reg = load_registry([REPO / "suites" / "specdec-gpu.toml"], default_engine="sglang")
    for name in ("baseline", "ngram", "standalone-d4", "standalone-d16", "dflash-b16", "eagle3"):
        cfg = reg.resolve(name, "sglang")
        assert cfg.draft is None or cfg.draft in sglang.drafts, name


def test_engine_args_extend_every_engine() -> None:
    suite = with_engine_args(load_suite_settings(REPO / "suites" / "specdec.toml"),
                             engine_args("--attention-backend triton"))  # fmt: skip
    assert suite.engine_settings("llamacpp").extra_args[-2:] == ("--attention-backend", "triton")
    assert suite.engine_settings("sglang").extra_args[-1] == "triton"
    for bad, message in (("'--x", "not a shell-quoted"), ("triton", "must start with a flag")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            engine_args(bad)


def test_the_fair_chain_differs_from_the_forks_tree_only_by_the_tree() -> None:
    """dflash-b16-triton is dflash-b16 on ddtree-b15's engine settings: against the fork's
    DDTree it lacks only the tree's switch (and names its block, 16, which the fork takes from
    the draft tokens), so an A/B between them measures the tree alone; dflash-b16 itself
    differs by those settings too."""
    registry = Registry(preset_configs())

    def pairs(args: tuple[str, ...]) -> set[str]:
        starts = [i for i, a in enumerate(args) if a.startswith("--")]
        ends = [*starts[1:], len(args)]
        return {" ".join(args[i:j]) for i, j in zip(starts, ends, strict=True)}

    tree = registry.resolve("ddtree-b15", "sglang").with_interface("sglang-ddtree-fork")
    chain = registry.resolve("dflash-b16-triton", "sglang")
    plain = registry.resolve("dflash-b16", "sglang")
    assert pairs(tree.args) - pairs(chain.args) == {"--speculative-dflash-enable-ddtree"}
    assert pairs(chain.args) - pairs(tree.args) == {"--speculative-dflash-block-size 16"}
    assert pairs(chain.args) - pairs(plain.args) == {
        "--attention-backend triton", "--page-size 1", "--disable-overlap-schedule"
    }  # fmt: skip
    assert chain.draft == tree.draft == plain.draft == "dflash"


def test_a_config_lists_its_other_interfaces(tmp_path: Path) -> None:
    """ddtree-b15 assumes the pull request's flags and also has the public fork's; an
    interface table without args, or with other keys, names itself and the fix."""
    cfg = Registry(preset_configs()).resolve("ddtree-b15", "sglang")
    assert cfg.interface == "sglang-pr-29907" and list(cfg.alternatives) == ["sglang-ddtree-fork"]
    fork = cfg.with_interface("sglang-ddtree-fork")
    assert fork.args[:3] == (
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-dflash-enable-ddtree",
    )
    assert (fork.interface, dict(fork.env), fork.alternatives) == ("sglang-ddtree-fork", {}, {})
    assert fork.sha256 != cfg.sha256 and cfg.with_interface(cfg.interface).sha256 == cfg.sha256
    assert cfg.to_dict()["alternatives"]["sglang-ddtree-fork"]["args"] == list(fork.args)
    with pytest.raises(ConfigError, match="has no interface 'x'; it has sglang-pr-29907, sglang"):
        cfg.with_interface("x")
    path = tmp_path / "c.toml"
    path.write_text('[configs.a]\nengine = "llamacpp"\n[configs.a.interfaces.b]\nenv = {}\n')
    with pytest.raises(ConfigError, match=r"interfaces\.b: expected a table with args"):
        load_registry([path])
    path.write_text(
        '[configs.a]\nengine = "llamacpp"\n[configs.a.interfaces.b]\nargs = []\nx = 1\n'
    )
    with pytest.raises(
        ConfigError, match=r"interfaces\.b: unknown key\(s\) x; valid keys: args, env"
    ):
        load_registry([path])


def test_the_modules_example_config_loads_as_written(tmp_path: Path) -> None:
    """The TOML in core/configs.py's docstring, where users read the keys: it loads, with
    ``flush`` on the config (written after the interface table it went into that table and
    was refused as an unknown key of the interface)."""
    import textwrap

    from pytest_specdec.core import configs

    doc = configs.__doc__ or ""
    example = textwrap.dedent(doc.split("::\n", 1)[1].split("\n\nNames resolve", 1)[0])
    path = tmp_path / "example.toml"
    path.write_text(example)
    cfg = load_registry([path]).resolve("my-config", "llamacpp")
    assert cfg.flush == "run" and cfg.draft == "draft"
    assert list(cfg.alternatives) == ["other-build"]
