"""Acceptance tests of the pytest face: options, usage errors, collection ids (no engine)."""

from __future__ import annotations

import pytest

from pytest_specdec.core.suitefile import builtin_suite_file


def test_unknown_config_fails_at_once_listing_valid_names(suite_project: pytest.Pytester) -> None:
    result = suite_project.runpytest_subprocess("suites", "--spec-config", "no-such-config")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    valid = "valid names: baseline, draft-d16, draft-d4, ngram, self-draft-d16"
    result.stderr.fnmatch_lines([f"*unknown spec config 'no-such-config'*{valid}*"])


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--specdec-runs", "0", "*--specdec-runs*'0' must be at least 1*"),
        ("--specdec-max-tokens", "lots", "*--specdec-max-tokens*'lots' is not a whole number*"),
        ("--specdec-engine", "tgi", "*--specdec-engine tgi: no such engine is installed*"),
        ("--specdec-server-url", "localhost:8000", "*--specdec-server-url*is not an http(s) URL*"),
        ("--specdec-workload", "no-such-suite", "*no-such-suite*"),
    ],
)
def test_bad_option_values_name_the_flag(
    suite_project: pytest.Pytester, flag: str, value: str, message: str
) -> None:
    result = suite_project.runpytest_subprocess("suites", flag, value)
    assert result.ret in (pytest.ExitCode.USAGE_ERROR, 2)
    result.stderr.fnmatch_lines([message])


def test_ids_read_config_then_prompt(suite_project: pytest.Pytester) -> None:
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py",
        "--collect-only",
        "-q",
        "--spec-config",
        "baseline,draft-d16",
        "--spec-config",
        "ngram",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "suites/test_throughput.py::test_throughput[[]baseline-fibonacci[]]",
            "*test_throughput[[]baseline-haiku[]]",
            "*test_throughput[[]draft-d16-json_parse[]]",
            "*test_throughput[[]ngram-quicksort[]]",
            "*test_verdict[[]ngram[]]",
            "18 tests collected*",
        ]
    )


def test_qualified_and_user_file_configs(suite_project: pytest.Pytester) -> None:
    extra = suite_project.makefile(
        ".toml", extra='[configs.mine]\nengine = "llamacpp"\nargs = ["-t", "1"]\n'
    )
    result = suite_project.runpytest_subprocess(
        "suites",
        "--collect-only",
        "-q",
        "--specdec-config-file",
        str(extra),
        "--spec-config",
        "mine,llamacpp:draft-d4",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*[[]mine-fibonacci[]]", "*[[]draft-d4-haiku[]]"])


def test_server_url_accepts_any_label(suite_project: pytest.Pytester) -> None:
    result = suite_project.runpytest_subprocess(
        "suites",
        "--collect-only",
        "-q",
        "--specdec-server-url",
        "http://127.0.0.1:9",
        "--spec-config",
        "their-build",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*[[]their-build-fibonacci[]]"])


def test_broken_config_file_names_the_file(suite_project: pytest.Pytester) -> None:
    bad = suite_project.makefile(".toml", bad='[configs.x]\nengine = "llamacp"\n')
    result = suite_project.runpytest_subprocess("suites", "--specdec-config-file", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{bad}*engine = 'llamacp' is not one of*"])


def test_help_shows_the_option_group(suite_project: pytest.Pytester) -> None:
    result = suite_project.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        ["*speculative-decoding benchmarks*", "*--spec-config=NAME*", "*--specdec-runs=N*"]
    )


def test_require_gpu_refuses_clearly_without_one(suite_project: pytest.Pytester) -> None:
    from pytest_specdec.gpu.nvml import probe

    if probe()[0]:
        pytest.skip("a GPU is present: the refusal cannot be shown here")
    result = suite_project.runpytest_subprocess("suites", "--specdec-require-gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdec-require-gpu: no usable NVIDIA GPU here: *"])


def test_sessions_interleave_and_judge_once(suite_project: pytest.Pytester) -> None:
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py",
        "--collect-only",
        "-q",
        "--spec-config",
        "baseline,ngram",
        "--specdec-sessions",
        "2",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*test_throughput[[]baseline-fibonacci[]]",
            "*test_throughput[[]ngram-fibonacci[]]",
            "*test_throughput[[]baseline@2-fibonacci[]]",
            "*test_verdict[[]baseline@2[]]",
            "*test_throughput[[]ngram@2-haiku[]]",
            "*test_verdict[[]ngram@2[]]",
            "22/24 tests collected (2 deselected)*",
        ]
    )


def test_a_config_only_sglang_has_runs_on_sglang_and_says_so(
    suite_project: pytest.Pytester,
) -> None:
    """The mission's command with no engine flag: ddtree-b15 exists for SGLang alone."""
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--collect-only", "-q", "--spec-config", "ddtree-b15"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*[[]ddtree-b15-fibonacci[]]", "*6 tests collected*"])
    header = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--collect-only", "--spec-config", "ddtree-b15"
    )
    header.stdout.fnmatch_lines(
        ["specdec: spec config 'ddtree-b15' exists only for engine sglang: running it on sglang*"]
    )
    asked = suite_project.runpytest_subprocess(
        "suites", "--collect-only", "--specdec-engine", "llamacpp", "--spec-config", "ddtree-b15"
    )
    assert asked.ret == pytest.ExitCode.USAGE_ERROR  # an engine was named: no guessing
    asked.stderr.fnmatch_lines(["*unknown spec config 'ddtree-b15' for engine llamacpp*"])


def test_engine_args_reach_the_engine_and_the_key(suite_project: pytest.Pytester) -> None:
    bad = suite_project.runpytest_subprocess("suites", "--specdec-engine-args", "oops")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--specdec-engine-args*must start with a flag*"])


def test_pyargs_runs_the_built_in_suite_in_any_folder(pytester: pytest.Pytester) -> None:
    """`pytest --pyargs pytest_specdec.suites` in a folder with no suites/: the rootdir is the
    folder (baselines/ are kept there, as results/ are) and the built-in suite file is read."""
    result = pytester.runpytest_subprocess(
        "--pyargs", "pytest_specdec.suites", "--co", "--spec-config", "baseline,draft-d16"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [f"specdec: suite file: the built-in {builtin_suite_file()} *rootdir {pytester.path};*",
         f"rootdir: {pytester.path}",
         "*<Function test_throughput[[]draft-d16-haiku[]]>",
         "*<Function test_verdict[[]draft-d16[]]>"]
    )  # fmt: skip
