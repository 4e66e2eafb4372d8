"""``specdec init``: the layout it writes is this repository's (the suite's test files are the
same files, the workflows are this repository's with its own parts replaced), it never
overwrites a file, and what it writes passes the checks this repository's workflows pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_workflows import (
    GRANTS,
    SECRET_STEPS,
    _run,
    actionlint,
    check_checkouts,
    check_configs,
    check_flags,
    check_load_job,
    check_pins,
    check_privilege,
    check_secrets,
    check_structure,
    expressions_in_scripts,
    load_command,
    run_plan,
    zizmor,
    zizmor_findings,
)

from pytest_specdec import __version__
from pytest_specdec.cli import main
from pytest_specdec.cli import workflows as workflow_module
from pytest_specdec.cli.layout import Layout, suite_tests
from pytest_specdec.cli.workflows import TemplateError, load_configs, workflows
from pytest_specdec.core.configs import load_registry, preset_configs
from pytest_specdec.core.suitefile import builtin_suite_file, load_suite_settings

REPO = Path(__file__).resolve().parent.parent
PACKAGE_SUITE = REPO / "pytest_specdec" / "suites"
WRITTEN = {
    "suites/test_throughput.py", "suites/test_lossless.py", "suites/test_concurrency.py",
    "suites/specdec.toml", "conftest.py", "baselines/.gitkeep", "SPECDEC.md",
    ".github/workflows/nightly-gpu.yml", ".github/workflows/update-baselines.yml",
}  # fmt: skip


def written(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_this_repositorys_suite_is_what_init_writes() -> None:
    """One copy of the test code (pytest_specdec/suites/); suites/test_*.py are the files
    `specdec init` writes, one for each test module of the package; suites/specdec.toml is the
    built-in suite file itself."""
    modules = sorted(p.name for p in PACKAGE_SUITE.glob("test_*.py"))
    assert sorted(Path(name).name for name in suite_tests()) == modules
    for name, text in suite_tests().items():
        assert (REPO / name).read_text(encoding="utf-8") == text, f"{name}: run specdec init"
    link = REPO / "suites" / "specdec.toml"
    assert link.is_symlink() and link.resolve() == builtin_suite_file().resolve()


def test_the_workflow_templates_are_this_repositorys_workflows() -> None:
    for name in ("nightly-gpu.yml", "update-baselines.yml"):
        template = REPO / "pytest_specdec" / "templates" / name
        assert template.read_bytes() == (REPO / ".github" / "workflows" / name).read_bytes(), (
            f"cp .github/workflows/{name} {template.relative_to(REPO)}"
        )


def test_init_writes_the_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["init", str(tmp_path), "--engine", "sglang", "--model", "org/target",
            "--draft-model", "dflash=/models/dflash", "--draft-model", "/models/draft"]  # fmt: skip
    assert main(argv) == 0
    assert written(tmp_path) == WRITTEN
    assert f"wrote {tmp_path / 'SPECDEC.md'}" in capsys.readouterr().out
    suite = load_suite_settings(tmp_path / "suites" / "specdec.toml")
    models = suite.models_for("sglang")
    assert suite.engine == "sglang" and models.target == "org/target"
    assert dict(models.drafts) == {"dflash": "/models/dflash", "draft": "/models/draft"}
    assert "eagle3" in (tmp_path / "suites" / "specdec.toml").read_text()  # a placeholder
    assert load_registry(list(suite.files)).resolve("dflash-b16", "sglang")
    nightly = yaml.safe_load((tmp_path / ".github/workflows/nightly-gpu.yml").read_text())
    assert nightly["env"]["NIGHTLY_CONFIGS"] == "baseline,ngram,standalone-d16,dflash-b16"
    # SGLang's ngram resets its n-gram store per request, which a load level does not do
    assert nightly["env"]["NIGHTLY_LOAD_CONFIGS"] == "baseline,standalone-d16,dflash-b16"
    assert (tmp_path / "baselines" / ".gitkeep").read_text() == ""


def test_the_suite_file_leaves_placeholders_where_nothing_was_given(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path)]) == 0
    suite = load_suite_settings(tmp_path / "suites" / "specdec.toml")
    assert suite.engine == "llamacpp" and suite.models_for("llamacpp").target is None
    text = (tmp_path / "suites" / "specdec.toml").read_text()
    assert "# target = " in text and "# drafts = { draft = " in text
    nightly = yaml.safe_load((tmp_path / ".github/workflows/nightly-gpu.yml").read_text())
    assert nightly["env"]["NIGHTLY_CONFIGS"] == "baseline,ngram"  # no draft model given
    assert nightly["env"]["NIGHTLY_LOAD_CONFIGS"] == "baseline,ngram"  # llama.cpp: no flush


def test_init_never_overwrites_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conftest.py").write_text("mine = 1\n")
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "specdec.toml").write_text("# mine\n")
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already has suites/specdec.toml, conftest.py; nothing was written" in err
    assert "--force" in err
    assert written(tmp_path) == {"conftest.py", "suites/specdec.toml"}  # all or nothing
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert "overwrote" in capsys.readouterr().out
    assert written(tmp_path) == WRITTEN and "mine" not in (tmp_path / "conftest.py").read_text()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--runner-labels", "gpu"], r"'gpu': give a JSON list of runner labels"),
        (["--runner-labels", '["a b"]'], r"give a JSON list of runner labels"),
        (["--engine", "trtllm"], r"invalid choice: 'trtllm'"),
    ],
)
def test_bad_options_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["init", str(tmp_path), *args])
    assert exit_.value.code == 2 and re.search(said, capsys.readouterr().err)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--configs", "baseline,eagle3"], "eagle3 is no llamacpp preset; give presets of"),
        (["--draft-model", "dflash="], "--draft-model 'dflash=': give [ROLE=]PATH"),
    ],
)
def test_bad_values_are_named_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["init", str(tmp_path), *args]) == 2
    assert said in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_workflow_the_edits_no_longer_fit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = workflow_module.template
    monkeypatch.setattr(
        workflow_module, "template", lambda name: real(name).replace('-e ".[dev]"', "-e .")
    )
    with pytest.raises(TemplateError, match=r"nightly-gpu.yml: .* occurs 0 time\(s\)"):
        workflows(Layout())


LAYOUTS = {
    "llamacpp": Layout(),
    "sglang": Layout(engine="sglang", drafts={"dflash": "d", "eagle3": "e", "draft": "s"},
                     runner_labels=("self-hosted", "h100")),
    "vllm": Layout(engine="vllm", configs=("baseline", "eagle3")),
}  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_written_workflows_pass_the_repositorys_checks(layout: Layout) -> None:
    """Every check of tests/test_workflows.py, on what init writes; the nightly has no bisect
    job (its build command is this repository's script) and installs from the index."""
    grants = {**GRANTS, "nightly-gpu.yml": dict(GRANTS["nightly-gpu.yml"])}
    del grants["nightly-gpu.yml"]["bisect"]
    secrets = {n: [s for s in steps if s[0] != "bisect"] for n, steps in SECRET_STEPS.items()}
    for path, text in workflows(layout).items():
        name = Path(path).name
        doc: dict[str, Any] = yaml.safe_load(text)
        check_structure(name, doc)
        check_pins(name, text)
        check_checkouts(name, doc)
        check_flags(name, doc)
        check_configs(name, doc)
        check_privilege(name, doc, grants[name])
        check_secrets(name, doc, secrets[name])
        if name == "nightly-gpu.yml":
            check_load_job(doc)
        assert expressions_in_scripts(doc) == []
        assert "-e " not in text and "scripts/" not in text and "h200" not in text
        assert f'"pytest-specdec=={__version__}"' in text
        assert str(list(layout.runner_labels)).replace("'", '"') in text
        header = text.split("\non:")[0]
        for variable in set(re.findall(r"vars\.(\w+)", text)):
            assert variable in header, f"{name}: vars.{variable} is not named in its header"


def night_value(text: str, outputs: dict[str, str]) -> str:
    """An env value as a scheduled night without variables sets it: ``a || 'b'`` is ``b``, a
    plan output is the plan's, a variable alone is empty."""
    needed = re.fullmatch(r"\$\{\{ needs\.plan\.outputs\.(\w+) \}\}", text)
    if needed:
        return outputs[needed[1]]
    default = re.search(r"\|\| '?([^'|]*?)'? \}\}$", text)
    if default:
        return default[1]
    return "" if "${{" in text else text


def job_defaults(doc: dict[str, Any], job: str, outputs: dict[str, str]) -> dict[str, str]:
    return {k: night_value(str(v), outputs) for k, v in doc["jobs"][job]["env"].items()}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_written_load_job_names_its_levels(layout: Layout, tmp_path: Path) -> None:
    """The user's suite file has no load levels, so the load job names them; it measures at
    the suite's own output length (its sessions join the suite's baselines), its load set is
    the plain config and the nightly set's speculative presets that keep their caches."""
    doc: dict[str, Any] = yaml.safe_load(workflows(layout)[".github/workflows/nightly-gpu.yml"])
    env = job_defaults(doc, "load", run_plan(doc, tmp_path))
    assert env["SPECDEC_LOAD_SUITE_FILE"] == "suites/specdec.toml"
    assert env["SPECDEC_LOAD_LEVELS"] == "1,4,16,64" and env["SPECDEC_LOAD_SESSIONS"] == "5"
    assert env["SPECDEC_LOAD_MAX_MINUTES"] == "15"
    assert env["SPECDEC_LOAD_FAIL_ON"] == "regressed,crossover"
    assert '--specdec-concurrency "$SPECDEC_LOAD_LEVELS"' in load_command(doc)
    assert "--specdec-max-tokens" not in load_command(doc)
    names = load_configs(layout)
    assert env["SPECDEC_LOAD_CONFIGS"] == ",".join(names) == doc["env"]["NIGHTLY_LOAD_CONFIGS"]
    presets = {c.name: c for c in preset_configs() if c.engine == layout.engine}
    assert names[0] == "baseline" and not presets["baseline"].speculative
    assert all(presets[n].speculative and not presets[n].flush for n in names[1:])
    assert set(names[1:]) <= set(layout.nightly_configs())


def test_the_written_load_command_runs_in_the_written_layout(tmp_path: Path) -> None:
    """The load job's own command line, with the values a night without variables gives it,
    collects the load levels in a folder `specdec init` laid out (but --specdec-require-gpu,
    which stops a run on a machine without a GPU at once)."""
    argv = ["init", str(tmp_path), "--engine", "sglang", "--model", "org/target",
            "--draft-model", "/models/draft"]  # fmt: skip
    assert main(argv) == 0
    assert load_suite_settings(tmp_path / "suites" / "specdec.toml").concurrency == ()
    doc: dict[str, Any] = yaml.safe_load(
        (tmp_path / ".github/workflows/nightly-gpu.yml").read_text()
    )
    env = job_defaults(doc, "load", run_plan(doc, tmp_path))
    assert env["SPECDEC_LOAD_CONFIGS"] == "baseline,standalone-d16"
    wrapper = (
        'pytest() { local a=(); for x in "$@"; do [[ $x == --specdec-require-gpu ]] || a+=("$x");'
        ' done; "$PYTHON" -m pytest "${a[@]}" --collect-only -q -p no:cacheprovider; }\n'
    )
    done = subprocess.run(
        ["bash", "-e", "-c", wrapper + load_command(doc)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False, env={**os.environ, **env, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for item in ("test_concurrency[baseline-c1]", "test_concurrency[standalone-d16@2-c64]",
                 "test_load_verdict[standalone-d16@5]"):  # fmt: skip
        assert f"suites/test_concurrency.py::{item}" in done.stdout, done.stdout


def write_workflows(folder: Path) -> list[Path]:
    for path, text in workflows(LAYOUTS["sglang"]).items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    return sorted((folder / ".github" / "workflows").iterdir())


def test_written_workflows_pass_zizmor(tmp_path: Path) -> None:
    write_workflows(tmp_path)
    assert zizmor_findings(zizmor(), tmp_path / ".github" / "workflows") == []


def test_written_workflows_pass_actionlint(tmp_path: Path) -> None:
    done = _run([*actionlint(), *map(str, write_workflows(tmp_path))], tmp_path)
    assert done.returncode == 0, f"actionlint:\n{done.stdout}{done.stderr}"


def test_a_model_path_relative_to_the_folder_is_written_as_the_suite_file_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "t.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--model", "models/t.gguf", "--draft-model", "org/hub-draft"]) == 0
    text = (tmp_path / "suites" / "specdec.toml").read_text()
    assert 'target = "../models/t.gguf"' in text and '"org/hub-draft"' in text
    models = load_suite_settings(tmp_path / "suites" / "specdec.toml").models_for("llamacpp")
    assert Path(models.target or "").resolve() == (tmp_path / "models" / "t.gguf").resolve()


def test_force_replaces_a_link_not_the_file_it_points_to(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "conftest.py"
    shared.parent.mkdir()
    shared.write_text("# the organisation's conftest\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "conftest.py").symlink_to(shared)
    assert main(["init", str(repo), "--force"]) == 0
    assert not (repo / "conftest.py").is_symlink() and written(repo) == WRITTEN
    assert shared.read_text() == "# the organisation's conftest\n"
    umask = os.umask(0o022)
    os.umask(umask)
    assert (repo / "SPECDEC.md").stat().st_mode & 0o777 == 0o666 & ~umask


def test_force_writes_every_file_or_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "specdec.toml").write_text("# mine\n")
    (tmp_path / "conftest.py").write_text("# mine\n")
    (tmp_path / ".github").write_text("a file where the workflows' folder goes\n")
    before = {p: p.read_text() if p.is_file() else "/" for p in tmp_path.rglob("*")}
    assert main(["init", str(tmp_path), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path / '.github' / 'workflows'}: " in err
    assert "nothing was written" in err
    after = {p: p.read_text() if p.is_file() else "/" for p in tmp_path.rglob("*")}
    assert after == before  # not a file changed; no temp file or new folder left


def test_a_full_disk_midway_leaves_every_file_as_it_was(tmp_path: Path) -> None:
    import resource
    import signal

    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "specdec.toml").write_text("# mine\n")

    def small_files() -> None:  # writes past 3000 bytes fail, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [sys.executable, "-m", "pytest_specdec.cli", "init", str(tmp_path), "--force"],
        capture_output=True, text=True, check=False, preexec_fn=small_files,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "File too large; nothing was written" in proc.stderr
    assert written(tmp_path) == {"suites/specdec.toml"}
    assert (tmp_path / "suites" / "specdec.toml").read_text() == "# mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suites"]
