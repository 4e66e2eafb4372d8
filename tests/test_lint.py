"""Config lint against the installed engines: llama.cpp's --help, SGLang's real parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import SGLANG_VERSION

from pytest_specdec.core.configs import (
    ConfigError,
    Registry,
    load_registry,
    parse_config,
    preset_configs,
)
from pytest_specdec.core.suitefile import EngineSettings, load_suite_settings
from pytest_specdec.engines import make_engine
from pytest_specdec.engines.base import BootContext
from pytest_specdec.engines.lint import (
    Finding,
    LintUnavailable,
    closest,
    eager_one_token_prefill,
    errors,
    flags_in_help,
    lint_by_help,
    load_prefill_advice,
    sglang_advice,
    unknown_flags,
)

HELP = """\
-h,    --help, --usage                  print usage and exit
-md,   --spec-draft-model, --model-draft FNAME
--spec-draft-n-max N                    number of tokens to draft (default: 3)
--spec-type none,draft-simple           type of speculative decoding
-t,    --threads N                      number of threads
"""


def test_flags_in_help_reads_every_alias() -> None:
    flags = flags_in_help(HELP)
    assert {"-md", "--spec-draft-model", "--model-draft", "--spec-draft-n-max", "-t"} <= flags
    assert "--spec-type" in flags and "FNAME" not in flags


def test_unknown_flags_name_the_closest_valid_one() -> None:
    found = unknown_flags(
        ["--spec-draft-n-maxx", "3", "-t", "2", "--spec-type=draft"], flags_in_help(HELP)
    )
    assert found == [
        Finding("--spec-draft-n-maxx", "unknown to the installed engine", "--spec-draft-n-max")
    ]
    assert "did you mean --spec-draft-n-max?" in str(found[0])
    assert unknown_flags(["-5", "--threads"], {"--threads"}) == []
    assert closest("--zzz", {"--spec-type"}) is None


def test_help_that_lists_nothing_is_reported(tmp_path: Path) -> None:
    with pytest.raises(LintUnavailable, match="printed no option list"):
        lint_by_help(["--x"], [sys.executable, "-c", "print('hello')"])
    with pytest.raises(LintUnavailable, match="cannot run"):
        lint_by_help(["--x"], [str(tmp_path / "missing-binary"), "--help"])


def test_vllm_lint_reads_serve_help(tmp_path: Path) -> None:
    fake = tmp_path / "vllm"
    fake.write_text(
        "#!/bin/sh\necho '  --host HOST'\necho '  --port PORT'\n"
        "echo '  --speculative-config SPECULATIVE_CONFIG'\necho '  --max-num-seqs N'\n"
    )
    fake.chmod(0o755)
    engine = make_engine("vllm", EngineSettings(binary=str(fake)))
    cfg = parse_config("x", {"engine": "vllm", "args": ["--max-num-seq", "8"]}, "f.toml")
    spec = engine.build_command(BootContext(cfg, "MODEL", None, "127.0.0.1", 1))
    (finding,) = engine.lint(spec)
    assert finding.flag == "--max-num-seq" and finding.suggestion == "--max-num-seqs"


@pytest.mark.engine
def test_llamacpp_lint_rejects_a_misspelled_flag(llama_server: Path) -> None:
    engine = make_engine("llamacpp", EngineSettings(binary=str(llama_server)))
    cfg = parse_config("typo", {"engine": "llamacpp", "args": ["--spec-draft-n-maxx", "3"]}, "f")
    spec = engine.build_command(BootContext(cfg, "M.gguf", None, "127.0.0.1", 1))
    assert [str(f) for f in engine.lint(spec)] == [
        "--spec-draft-n-maxx: unknown to the installed engine; did you mean --spec-draft-n-max?"
    ]


@pytest.mark.engine
def test_llamacpp_presets_pass_lint(llama_server: Path) -> None:
    engine = make_engine("llamacpp", EngineSettings(binary=str(llama_server)))
    for cfg in Registry(preset_configs()).all("llamacpp"):
        draft = "D.gguf" if cfg.draft else None
        spec = engine.build_command(BootContext(cfg, "M.gguf", draft, "127.0.0.1", 1, "k"))
        assert engine.lint(spec) == [], cfg.name


def _sglang_spec(cfg_name: str, python: str, extra: tuple[str, ...] = ()) -> tuple[object, object]:
    engine = make_engine("sglang", EngineSettings(python=python, extra_args=extra))
    cfg = Registry(preset_configs()).resolve(cfg_name, "sglang")
    draft = "org/drafter" if cfg.draft else None
    return engine, engine.build_command(BootContext(cfg, "org/target", draft, "127.0.0.1", 30000))


UPSTREAM = [
    "baseline", "dflash-b16", "eagle3", "ngram", "standalone-d4", "standalone-d16",
    "standalone-tree-b15", "standalone-chain-b16",
]  # fmt: skip


DRAFT_EXTEND_EAGER = {"eagle3", "standalone-d4", "standalone-d16"}  # fa3 by default


@pytest.mark.parametrize("name", UPSTREAM)
def test_upstream_presets_parse_with_sglangs_own_parser(sglang_python: str, name: str) -> None:
    engine, spec = _sglang_spec(name, sglang_python, ("--mem-fraction-static", "0.8"))
    found = engine.lint(spec)  # type: ignore[attr-defined]
    assert errors(found) == []
    # without --speculative-draft-attention-backend, an EAGLE-family config is warned about
    assert [f.flag for f in found] == (
        ["--speculative-draft-attention-backend"] if name in DRAFT_EXTEND_EAGER else []
    )


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (["--speculative-algorithm", "STANDALONE"], "not set (SGLang 0.5.17 picks fa3"),
        (["--speculative-algorithm=eagle3", "--speculative-draft-attention-backend", "fa3"],
         "set to fa3: the EAGLE3 draft-extend step then runs without a CUDA graph"),
        (["--speculative-algorithm", "EAGLE", "--attention-backend", "fa3"], "set to fa3"),
        (["--speculative-algorithm", "STANDALONE", "--attention-backend", "triton"], None),
        (["--speculative-algorithm", "STANDALONE", "--attention-backend", "fa3",
          "--speculative-draft-attention-backend=triton"], None),
        (["--speculative-algorithm", "NGRAM"], None),
        (["--speculative-algorithm", "DFLASH"], None),
        ([], None),
    ],
)  # fmt: skip
def test_a_draft_extend_without_a_cuda_graph_is_warned_about(
    args: list[str], warned: str | None
) -> None:
    found = sglang_advice(args)
    if warned is None:
        assert found == []
        return
    (finding,) = found
    assert finding.warning and warned in finding.problem
    assert str(finding).startswith("warning: --speculative-draft-attention-backend: ")
    assert finding.problem.endswith("add --speculative-draft-attention-backend triton")


POW2_PREFILL = ("--cuda-graph-max-bs-prefill", "4", "--cuda-graph-bs-prefill", "1", "2", "4")

# SGLang 0.5.17's prefill graphs: (args, why a one-token prefill runs eagerly, or None).
PREFILL_CASES = [
    ([], "no --cuda-graph-bs-prefill is given, and SGLang 0.5.17's default prefill graph sizes "
         "(4, 8, 12, ...) leave a one-token prefill eager"),
    (list(POW2_PREFILL), None),
    (["--cuda-graph-bs-prefill=1"], None),
    (["--cuda-graph-bs-prefill", "4", "8", "--tp", "1"],
     "--cuda-graph-bs-prefill 4 8 has no size 1"),
    (["--piecewise-cuda-graph-tokens", "1", "--cuda-graph-bs-prefill", "2", "4"],
     "--cuda-graph-bs-prefill 2 4 has no size 1"),
    (["--disable-piecewise-cuda-graph", *POW2_PREFILL],
     "--disable-piecewise-cuda-graph turns prefill CUDA graphs off"),
    (["--cuda-graph-backend-prefill=disabled", *POW2_PREFILL],
     "--cuda-graph-backend-prefill disabled turns prefill CUDA graphs off"),
    (["--disable-prefill-cuda-graph", *POW2_PREFILL], "--disable-prefill-cuda-graph turns"),
    (["--disable-cuda-graph", *POW2_PREFILL], "--disable-cuda-graph turns"),
    (["--disable-prefill-cuda-graph", "--cuda-graph-backend-prefill", "breakable",
      *POW2_PREFILL], None),
    (["--disable-piecewise-cuda-graph", "--enforce-piecewise-cuda-graph", *POW2_PREFILL], None),
    (["--cuda-graph-config", '{"prefill": {"bs": [2, 4]}}', *POW2_PREFILL],
     "--cuda-graph-config prefill bs [2, 4] has no size 1"),
    (["--cuda-graph-config", '{"prefill": {"backend": "disabled"}}', *POW2_PREFILL],
     "--cuda-graph-config prefill backend turns prefill CUDA graphs off"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "eager"), PREFILL_CASES)
def test_a_one_token_prefill_outside_cuda_graphs_is_named(
    args: list[str], eager: str | None
) -> None:
    found = eager_one_token_prefill(args)
    assert found is None if eager is None else found is not None and found.startswith(eager)


PREFILL_PROBE = r"""
import argparse, json, sys, types
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.loads(sys.argv[1]):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    args = types.SimpleNamespace(**vars(parser.parse_args(["--model-path", "m", *argv])))
    ServerArgs._parse_cuda_graph_config(args)
    prefill = args.cuda_graph_config.prefill
    out.append([str(prefill.backend), prefill.bs])
print(json.dumps(out))
"""


def test_the_prefill_rule_agrees_with_sglangs_own_resolution(sglang_python: str) -> None:
    """SGLang 0.5.17 resolves each case's prefill graph backend and sizes itself
    (ServerArgs._parse_cuda_graph_config on its own parser's namespace): a one-token prefill
    has a graph exactly where the backend is on and the sizes include 1."""
    cases = [args for args, _ in PREFILL_CASES]
    proc = subprocess.run(
        [sglang_python, "-c", PREFILL_PROBE, json.dumps(cases)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = json.loads(proc.stdout.strip().splitlines()[-1])
    for args, (backend, sizes) in zip(cases, resolved, strict=True):
        graphed = not backend.lower().endswith("disabled") and 1 in (sizes or [])
        assert (eager_one_token_prefill(args) is None) == graphed, (args, backend, sizes)


def test_load_levels_with_eager_prefill_are_warned_with_the_fix() -> None:
    (finding,) = load_prefill_advice([1, 4, 16], ["--mem-fraction-static", "0.8"])
    assert finding.warning and errors([finding]) == []
    assert str(finding).startswith(
        "warning: --cuda-graph-bs-prefill: concurrency [1, 4, 16] with the SGLang args: no "
        "--cuda-graph-bs-prefill is given, and SGLang 0.5.17's default prefill graph sizes "
        "(4, 8, 12, ...) leave a one-token prefill eager"
    )
    assert "every arriving request's prefill then runs eagerly" in finding.problem
    assert "moved 2.8-fold between boots on an H200" in finding.problem
    assert finding.problem.endswith(
        "add --cuda-graph-bs-prefill 1 2 4 ... N with --cuda-graph-max-bs-prefill N at least "
        "the largest prefill expected (the load suite uses 256)"
    )
    off = load_prefill_advice([1, 8], ["--disable-piecewise-cuda-graph", *POW2_PREFILL])
    assert "--disable-piecewise-cuda-graph turns prefill CUDA graphs off" in off[0].problem


def test_load_levels_with_prefill_graphs_from_one_token_are_not_warned() -> None:
    assert load_prefill_advice([1, 4, 16], POW2_PREFILL) == []
    full = ["--cuda-graph-backend-prefill", "full", *POW2_PREFILL]
    assert load_prefill_advice([64], full) == []


def test_one_client_or_no_load_level_is_not_warned() -> None:
    assert load_prefill_advice([1], []) == []
    assert load_prefill_advice([], ["--disable-piecewise-cuda-graph"]) == []


def test_the_load_suite_puts_every_prefill_in_a_graph_but_in_the_forks_interface() -> None:
    """suites/specdec-gpu-load.toml's own settings put every prefill up to 256 new tokens in a
    graph; its older-graph-flags interface (the DDTree fork, which has no prefill graph flags)
    keeps prefill eager, and a load run on the fork is warned so."""
    load = load_suite_settings(Path(__file__).parent.parent / "suites" / "specdec-gpu-load.toml")
    settings = load.engine_settings("sglang")
    assert max(load.concurrency) > 1
    assert load_prefill_advice(load.concurrency, settings.extra_args) == []
    (fork,) = load_prefill_advice(load.concurrency, settings.interfaces["older-graph-flags"])
    assert "--disable-piecewise-cuda-graph turns prefill CUDA graphs off" in fork.problem


# Of the DDTree fork's parser (server_args.py at 514ea1f3e), the graph flags: one decode size
# list, and prefill graphs that are its piecewise graphs, sized by their own flags.
FORK_GRAPH_FLAGS = [
    "--cuda-graph-max-bs", "--cuda-graph-bs", "--disable-cuda-graph",
    "--disable-piecewise-cuda-graph", "--enforce-piecewise-cuda-graph",
    "--piecewise-cuda-graph-tokens", "--piecewise-cuda-graph-max-tokens",
]  # fmt: skip


FORK_ARGS = ["--cuda-graph-max-bs", "64", "--disable-piecewise-cuda-graph"]
PREFILL_FIXES = [
    (FORK_ARGS, FORK_GRAPH_FLAGS,
     "drop --disable-piecewise-cuda-graph and add --piecewise-cuda-graph-tokens 1 2 4 ... N with "
     "--piecewise-cuda-graph-max-tokens N at least the largest prefill expected (the load suite "
     "uses 256) (this SGLang has no --cuda-graph-bs-prefill: its prefill graphs are piecewise)"),
    ([*FORK_ARGS, "--speculative-algorithm", "DFLASH"], FORK_GRAPH_FLAGS,
     "its prefill graphs are piecewise); a DFLASH prefill still runs eagerly there: the DDTree "
     "fork captured those graphs without the hidden states its prefill keeps for the drafter, "
     'and replayed none of 232 prefill batches (docs/gpu-run.md, "An H100: DDTree under load '
     'on the fork")'),
    (["--disable-piecewise-cuda-graph"], None,
     "drop --disable-piecewise-cuda-graph and add --cuda-graph-bs-prefill 1 2 4 ... N with "
     "--cuda-graph-max-bs-prefill N at least the largest prefill expected (the load suite uses "
     "256)"),
    ([], ["--cuda-graph-max-bs"],
     "this SGLang's parser names no prefill graph sizes (--cuda-graph-bs-prefill or "
     "--piecewise-cuda-graph-tokens): judge its load levels knowing that a small prefill runs "
     "eagerly"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "flags", "ending"), PREFILL_FIXES)
def test_the_prefill_fix_is_told_in_the_installed_sglangs_own_flags(
    args: list[str], flags: list[str] | None, ending: str
) -> None:
    """A load run on the fork was told to add --cuda-graph-bs-prefill, which its parser does
    not have, and not to drop the switch that turns its prefill graphs off; the fix names the
    installed SGLang's own flags (0.5.17's where they are not known)."""
    (finding,) = load_prefill_advice([1, 4, 16], args, flags=flags)
    assert finding.problem.endswith(ending)


def test_the_default_prefill_sizes_are_named_by_the_installed_sglangs_flag() -> None:
    """With no sizes given, the reason names the build's own sizes flag: on the fork,
    --piecewise-cuda-graph-tokens (default 4, 8, 12, ... as 0.5.17's), not 0.5.17's flag."""
    (finding,) = load_prefill_advice([1, 16], ["--cuda-graph-max-bs", "64"], flags=FORK_GRAPH_FLAGS)
    assert finding.flag == "--piecewise-cuda-graph-tokens"
    assert "no --piecewise-cuda-graph-tokens is given, and this SGLang's default" in finding.problem
    assert "--cuda-graph-bs-prefill is given" not in finding.problem
    (release,) = load_prefill_advice([1, 16], ["--cuda-graph-max-bs", "64"])
    assert release.flag == "--cuda-graph-bs-prefill"
    assert "no --cuda-graph-bs-prefill is given, and SGLang 0.5.17's default" in release.problem


def test_a_load_run_plan_carries_the_prefill_warning(sglang_python: str, tmp_path: Path) -> None:
    """The warning reaches a run through the plan's lint (shown with the run's notes), only
    where the run has load levels above one client: the settings are the same either way."""
    from pytest_specdec.driver.plan import Planner
    from pytest_specdec.driver.settings import RunSettings

    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(
        f'[engines.sglang]\npython = "{sglang_python}"\n'
        'extra_args = ["--mem-fraction-static", "0.8"]\n'
    )
    suite = load_suite_settings(suite_file)
    cfg = next(c for c in preset_configs() if c.qualified_name == "sglang:baseline")
    model = tmp_path / "target"
    model.mkdir()
    (model / "config.json").write_text("{}")
    under_load = RunSettings(engine="sglang", model=str(model), concurrency=(1, 4))
    plan = Planner(under_load, suite).plan(cfg)
    assert isinstance(plan.lint, list)
    (line,) = [w for w in plan.lint if "--cuda-graph-bs-prefill" in w]
    assert line.startswith("warning: --cuda-graph-bs-prefill: concurrency [1, 4] with the SGLang")
    assert line.endswith("(the load suite uses 256)")  # 0.5.17's parser has its sizes flag
    one_request = Planner(RunSettings(engine="sglang", model=str(model)), suite).plan(cfg)
    assert isinstance(one_request.lint, list)
    assert not [w for w in one_request.lint if "--cuda-graph-bs-prefill" in w]


@pytest.mark.parametrize("name", ["ddtree-b15", "ddtree-b16"])
def test_ddtree_presets_are_flagged_as_not_upstream(sglang_python: str, name: str) -> None:
    engine, spec = _sglang_spec(name, sglang_python)
    found = [f.flag for f in engine.lint(spec)]  # type: ignore[attr-defined]
    assert found == ["--speculative-ddtree-budget", "--speculative-algorithm DDTREE"]


def test_sglang_parser_rejects_a_misspelled_flag(sglang_python: str) -> None:
    engine = make_engine("sglang", EngineSettings(python=sglang_python))
    cfg = parse_config("x", {"engine": "sglang", "args": ["--speculative-eagle-topkk", "4"]}, "f")
    spec = engine.build_command(BootContext(cfg, "org/target", None, "127.0.0.1", 30000))
    (finding,) = engine.lint(spec)
    assert finding.flag == "--speculative-eagle-topkk"
    assert finding.suggestion == "--speculative-eagle-topk"
    assert "SGLang's argument parser" in finding.problem


def test_sglang_parser_rejects_a_bad_value(sglang_python: str) -> None:
    engine = make_engine("sglang", EngineSettings(python=sglang_python))
    cfg = parse_config("x", {"engine": "sglang", "args": ["--speculative-num-steps", "three"]}, "f")
    spec = engine.build_command(BootContext(cfg, "org/target", None, "127.0.0.1", 30000))
    (finding,) = engine.lint(spec)
    assert "invalid int value: 'three'" in finding.problem


KEY_PROBE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
try:  # 0.5.23 and later
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
except ImportError:  # 0.5.17
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
argv = ConfigArgumentMerger(parser).merge_config_with_args(json.loads(sys.argv[1]))
print(json.dumps(parser.parse_args(argv).api_key))
"""


def test_sglang_reads_the_key_file_the_adapter_writes(sglang_python: str, tmp_path: Path) -> None:
    """What SGLang's own launcher does with --config (prepare_server_args): the key, quotes,
    backslash and non-ASCII included, arrives as api_key while the argv never holds it."""
    key = 'k"ey\\with/quotes é'
    engine = make_engine("sglang", EngineSettings(python=sglang_python))
    cfg = Registry(preset_configs()).resolve("eagle3", "sglang")
    ctx = BootContext(cfg, "org/target", "org/drafter", "127.0.0.1", 30000, key, tmp_path)
    spec = engine.build_command(ctx)
    server_args = spec.argv[spec.argv.index("sglang.launch_server") + 1 :]
    assert not any(key in a for a in server_args)
    proc = subprocess.run(
        [sglang_python, "-c", KEY_PROBE, json.dumps(server_args)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == key
    assert errors(engine.lint(spec)) == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "suite", ["specdec-gpu.toml", "specdec-gpu-load.toml", "specdec-gpu-load-stream.toml"]
)
def test_the_gpu_suite_file_settings_parse(sglang_python: str, suite: str) -> None:
    """The GPU suite files' engine flags (the load suite's prefill graph sizes and GC warning
    too) with every upstream preset, through the parser of the release GPU runners have."""
    settings = load_suite_settings(Path(__file__).parent.parent / "suites" / suite)
    extra = settings.engine_settings("sglang").extra_args
    for name in UPSTREAM:
        engine, spec = _sglang_spec(name, sglang_python, extra)
        assert engine.lint(spec) == [], name  # type: ignore[attr-defined]  # no warning either


def test_ddtree_on_a_runner_with_sglang_names_what_is_missing(
    sglang_python: str, suite_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest suites --spec-config ddtree-b15`, no engine flag, SGLang installed: the run goes
    to SGLang and stops before booting, naming the interfaces the config has (the pull
    request's and the public fork's) and why the installed SGLang takes neither."""
    monkeypatch.setenv("SPECDEC_SGLANG_PYTHON", sglang_python)
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--spec-config", "ddtree-b15", "-k", "fibonacci",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*config sglang:ddtree-b15 (*) has interfaces sglang-pr-29907, sglang-ddtree-fork, and "
        f"the installed sglang {SGLANG_VERSION} takes none of them: interface sglang-pr-29907: "
        "*--speculative-algorithm DDTREE: not an algorithm of the installed SGLang*; interface "
        "sglang-ddtree-fork: --speculative-dflash-enable-ddtree: unknown to SGLang's argument "
        "parser*",
    ])  # fmt: skip


def test_configs_lint_warns_and_passes_a_config_without_the_draft_backend(
    sglang_python: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specdec configs lint standalone-d16 --engine sglang` with the CPU suite file (no
    draft attention backend): every flag is valid, so exit 0, with the warning printed."""
    from pytest_specdec.cli.main import main

    monkeypatch.setenv("SPECDEC_SGLANG_PYTHON", sglang_python)
    monkeypatch.chdir(Path(__file__).parent.parent)
    assert main(["configs", "lint", "standalone-d16", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "sglang:standalone-d16: warning: --speculative-draft-attention-backend: not set"
    )
    assert out[-1].startswith("sglang:standalone-d16: ok (sglang 0.5.17 accepts every flag)")


def test_configs_lint_names_the_version_of_the_parser_virtualenv_it_asked(
    sglang_python: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no interpreter set and no SGLang in this one, lint asks the parser virtualenv
    ./scripts/setup installs, and says so: its version and interpreter, not a bare "sglang"."""
    import importlib.util

    from pytest_specdec.cli.main import main

    venv = Path(sglang_python).parent.parent
    if not venv.name.startswith("sglang-") or not venv.name.endswith("-venv"):
        pytest.skip(f"{sglang_python} is not a parser virtualenv of ./scripts/setup")
    monkeypatch.delenv("SPECDEC_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("SPECDEC_CACHE", str(venv.parent))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sglang" else real_find_spec(name, *a),
    )
    monkeypatch.chdir(Path(__file__).parent.parent)
    assert main(["configs", "lint", "standalone-d16", "--engine", "sglang"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert (
        last == f"sglang:standalone-d16: ok (sglang 0.5.17 in {sglang_python} accepts every flag)"
    )


def test_configs_lint_checks_every_interface_of_ddtree(
    sglang_python: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specdec configs lint sglang:ddtree-b15` against SGLang 0.5.17's own parser: each of
    the config's interfaces is checked and named; neither is taken, so exit 1."""
    from pytest_specdec.cli.main import main

    monkeypatch.setenv("SPECDEC_SGLANG_PYTHON", sglang_python)
    monkeypatch.chdir(Path(__file__).parent.parent)
    assert main(["configs", "lint", "sglang:ddtree-b15"]) == 1
    out = capsys.readouterr().out
    assert "sglang:ddtree-b15 (interface sglang-pr-29907): --speculative-ddtree-budget" in out
    assert (
        "sglang:ddtree-b15 (interface sglang-ddtree-fork): --speculative-dflash-enable-ddtree: "
        "unknown to SGLang's argument parser"
    ) in out
    assert "boots with interface" not in out


FORK_PYTHON = os.environ.get("SPECDEC_SGLANG_FORK_PYTHON")


@pytest.mark.skipif(
    not FORK_PYTHON,
    reason="set SPECDEC_SGLANG_FORK_PYTHON to the interpreter ./scripts/install-sglang-fork-parser "
    "prints for the DDTree fork's wheel (./scripts/build-sglang-fork-wheel)",
)
def test_ddtree_b15_boots_with_the_forks_interface_where_the_fork_is_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the parser of DB-Guo/sglang-ddtree-dev: the pull request's flags are refused, the
    fork's taken, and that is the interface ddtree-b15 boots with."""
    from pytest_specdec.cli.main import main

    monkeypatch.setenv("SPECDEC_SGLANG_PYTHON", str(FORK_PYTHON))
    monkeypatch.chdir(Path(__file__).parent.parent)
    assert main(["configs", "lint", "sglang:ddtree-b15"]) == 0
    out = capsys.readouterr().out
    assert "(interface sglang-pr-29907): --speculative-ddtree-budget" in out
    assert "(interface sglang-ddtree-fork): ok (sglang 0.0.0.dev0+ddtree" in out
    assert out.rstrip().endswith("sglang:ddtree-b15: boots with interface sglang-ddtree-fork")


def test_engine_interfaces_boot_the_extra_args_the_installed_sglang_takes(
    sglang_python: str, tmp_path: Path
) -> None:
    """[engines.sglang.interfaces.NAME] in a suite file: the suite's own extra_args name a flag
    this SGLang does not have (as 0.5.17's graph flags are unknown to the DDTree fork), so its
    own parser picks the interface whose flags it takes, once per engine; the record says
    which, and why not the other."""
    from pytest_specdec.driver.plan import Planner
    from pytest_specdec.driver.settings import RunSettings

    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(
        f'[engines.sglang]\npython = "{sglang_python}"\n'
        'extra_args = ["--cuda-graph-max-bs-everywhere", "4"]\n'
        '[engines.sglang.interfaces.older]\nextra_args = ["--cuda-graph-max-bs", "4"]\n'
        '[engines.sglang.interfaces.also]\nextra_args = ["--dtype", "float16"]\n'
    )
    suite = load_suite_settings(suite_file)
    cfg = next(c for c in preset_configs() if c.qualified_name == "sglang:baseline")
    planner = Planner(RunSettings(engine="sglang", model="org/target"), suite)
    engine = planner.engine_for(cfg)
    assert engine.settings.extra_args == ("--cuda-graph-max-bs", "4")
    label, _, tried = planner.engine_choice["sglang"]
    assert label == "older" and list(tried) == ["default"]
    assert "--cuda-graph-max-bs-everywhere: unknown to SGLang's argument parser" in tried["default"]
    assert planner.engine_for(cfg).settings is engine.settings  # chosen once
    assert planner.untried(planner.plan(cfg)) == []  # lint chose: nothing left untried

    unlinted = Planner(RunSettings(engine="sglang", model="org/target", lint=False), suite)
    plan = unlinted.plan(cfg)  # lint off: its own extra_args, booted as written
    assert plan.engine.settings.extra_args == ("--cuda-graph-max-bs-everywhere", "4")
    assert unlinted.untried(plan) == ["older", "also"]

    bad = tmp_path / "bad.toml"
    bad.write_text('[engines.sglang.interfaces.older]\nargs = ["--x"]\n')
    with pytest.raises(ConfigError, match=r"interfaces.older\]: give exactly one key, extra_args"):
        load_suite_settings(bad)


def test_the_parser_is_asked_once_per_command_line_whatever_the_port(
    sglang_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each boot picks a free port; the parser's answer does not depend on it, so a command line
    linted once (as the interface is chosen) is not parsed again at its boot, nor at the next
    run's (on an H200 each parse of SGLang's arguments took about 20 s)."""
    from pytest_specdec.engines.lint import key_yaml_name, lint_sglang, probe_argv
    from pytest_specdec.engines.scripts import cache_dir

    assert probe_argv(["--model-path", "m", "--port", "41234", "--tp", "1"]) == [
        "--model-path", "m", "--port", "30000", "--tp", "1",
    ]  # fmt: skip
    assert probe_argv(["--port=5", "--port"]) == ["--port=30000", "--port"]
    # the API key's private YAML (a new folder and port each boot) is no part of the key
    keyed = ["--model-path", "m", "--config", f"/tmp/specdec-x1/{key_yaml_name(41234)}"]
    assert probe_argv(keyed) == ["--model-path", "m"]
    assert probe_argv(["--config", "mine.yaml"]) == ["--config", "mine.yaml"]
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECDEC_SCRIPT_CACHE", raising=False)
    argv = ["--model-path", "org/target", "--host", "127.0.0.1", "--no-such-flag"]
    first = lint_sglang(sglang_python, [*argv, "--port", "41234"])
    assert [f.flag for f in first] == ["--no-such-flag"]
    entries = sorted(cache_dir().rglob("*.json"))
    assert len(entries) == 1
    assert lint_sglang(sglang_python, [*argv, "--port", "50001"]) == first
    assert sorted(cache_dir().rglob("*.json")) == entries  # answered from the cache


def test_the_streaming_suites_own_configs_parse_with_its_settings(sglang_python: str) -> None:
    """suites/specdec-gpu-load-stream.toml's configs (SGLang streaming every eighth token)
    with the load suite's engine flags, through the release's own parser: no error, no
    warning; each differs from the config it copies by --stream-interval 8 alone."""
    path = Path(__file__).parent.parent / "suites" / "specdec-gpu-load-stream.toml"
    settings = load_suite_settings(path)
    extra = settings.engine_settings("sglang").extra_args
    registry = load_registry(settings.files, "sglang")
    engine = make_engine("sglang", EngineSettings(python=sglang_python, extra_args=extra))
    for name, plain in (("baseline-s8", "baseline"), ("standalone-d16-s8", "standalone-d16")):
        cfg = registry.resolve(name, "sglang")
        assert list(cfg.args) == [*registry.resolve(plain, "sglang").args, "--stream-interval", "8"]
        draft = "org/drafter" if cfg.draft else None
        spec = engine.build_command(BootContext(cfg, "org/target", draft, "127.0.0.1", 30000))
        assert engine.lint(spec) == [], name  # type: ignore[attr-defined]
