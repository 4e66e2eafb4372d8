"""The package as people install it: the sdist and the wheel built from this tree (build and
twine pinned in constraints.txt), the wheel the sdist builds being the same wheel, their
metadata, and the wheel installed into a new virtualenv outside the repository, where
``specdec init`` lays out an empty folder and the suite it wrote runs against the real
llama-server.

The virtualenv takes its dependencies from this Python (its site-packages named in a .pth
file: they are this install's, pinned) and pytest-specdec from the wheel alone; that the
repository's own copy does not leak in is checked, not assumed (``pytest_specdec.__file__``
and the plugin pytest loads lie inside the virtualenv).
"""

from __future__ import annotations

import base64
import csv
import email
import hashlib
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests_support import missing

import pytest_specdec

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # builds the package (about 20 s), once for this module
SHORT = ("--specdec-workload", "two.jsonl", "--specdec-runs", "3", "--specdec-max-tokens", "16")


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        missing(f"{module} is not installed (the dev extra pins it)", "pip install -e '.[dev]'")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def tracked_tree(into: Path) -> Path:
    """This tree's files as git sees them (tracked and new, not ignored) copied to ``into``,
    links as links: a build here writes build/ and *.egg-info into its folder."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO)
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return into


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path
    wheel_of_sdist: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and the wheel, each built from the tree, and a wheel built from the sdist."""
    _need("build")
    work = tmp_path_factory.mktemp("build")
    source = tracked_tree(work / "src")
    build = [sys.executable, "-m", "build", "--sdist", "--wheel"]
    _run([*build, "--outdir", str(work / "dist"), str(source)], work)
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "unpacked", filter="data")
    (unpacked,) = (work / "unpacked").iterdir()
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "again"), str(unpacked)],
         work)  # fmt: skip
    (again,) = (work / "again").glob("*.whl")
    return Built(sdist, wheel, again)


def record(wheel: Path) -> dict[str, str]:
    """A wheel's RECORD: every file with its sha256 (RECORD's own line has none)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(archive.read(name).decode().splitlines())
        files = {row[0]: row[1] for row in rows}
        assert set(files) == set(archive.namelist())
        for path, digest in files.items():  # RECORD says what the archive holds
            if digest:
                data = hashlib.sha256(archive.read(path)).digest()
                assert digest == "sha256=" + _b64(data), path
    return files


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_the_sdist_builds_the_same_wheel(built: Built) -> None:
    assert built.wheel.name == built.wheel_of_sdist.name
    assert record(built.wheel) == record(built.wheel_of_sdist)


def test_the_wheel_carries_what_a_user_runs(built: Built) -> None:
    files = set(record(built.wheel))
    for name in ("test_throughput.py", "test_lossless.py", "test_concurrency.py", "specdec.toml"):
        assert f"pytest_specdec/suites/{name}" in files
    for name in ("nightly-gpu.yml", "update-baselines.yml"):
        assert f"pytest_specdec/templates/{name}" in files
    assert "pytest_specdec/presets/llamacpp.toml" in files and "pytest_specdec/py.typed" in files
    version = pytest_specdec.__version__
    assert f"pytest_specdec-{version}.dist-info/licenses/LICENSE" in files
    with tarfile.open(built.sdist) as tar:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= names
    assert not any(n.startswith("tests/") for n in names)


def test_metadata(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        version = pytest_specdec.__version__
        meta = email.message_from_bytes(
            archive.read(f"pytest_specdec-{version}.dist-info/METADATA")
        )
    assert meta["Version"] == version  # the one place: pytest_specdec.__version__
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Repository", "Issues", "Changelog"}
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Pytest" in classifiers and "Typing :: Typed" in classifiers
    assert meta["Requires-Python"] == ">=3.10"
    assert "Programming Language :: Python :: 3.10" in classifiers  # the lowest one it allows
    license_text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{version}]" in changelog and f"[{version}]: " in changelog


def test_twine_check_passes(built: Built) -> None:
    _need("twine")
    said = _run([sys.executable, "-m", "twine", "check", "--strict",
                 str(built.sdist), str(built.wheel)], built.sdist.parent)  # fmt: skip
    assert said.count("PASSED") == 2, said


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv outside the repository: the package is the wheel's, the dependencies
    are this Python's. Its site-packages folders are named in a .pth file of the virtualenv,
    after the virtualenv's own, which also works where this Python is itself a virtualenv
    (nox), whose packages --system-site-packages would not see; the .pth files in them (an
    editable install's finder among them) are not run."""
    folder = tmp_path_factory.mktemp("venv") / "env"
    assert not folder.is_relative_to(REPO)
    _run([sys.executable, "-m", "venv", str(folder)], folder.parent)
    python = str(folder / "bin" / "python")
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   folder, clean_env()).strip()  # fmt: skip
    ours = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    (Path(purelib) / "this-pythons-packages.pth").write_text("\n".join(ours) + "\n")
    install = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--no-index", "--ignore-installed"]  # fmt: skip
    _run([*install, str(built.wheel)], folder.parent, clean_env())
    return folder


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without a PYTHONPATH that would put the repository first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


SHOW_PLUGIN = """

def pytest_report_header():
    import pytest_specdec.plugin

    return [f"specdec plugin from {pytest_specdec.plugin.__file__}"]
"""


@pytest.mark.engine
def test_the_installed_wheel_lays_out_and_runs_a_suite(
    venv: Path, llama_server: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    python, specdec = str(venv / "bin" / "python"), str(venv / "bin" / "specdec")
    env = clean_env(SPECDEC_LLAMA_SERVER=str(llama_server))
    where = _run([python, "-c", "import pytest_specdec; print(pytest_specdec.__file__)"],
                 tmp_path, env)  # fmt: skip
    assert Path(where.strip()).is_relative_to(venv), f"pytest_specdec came from {where}"

    project = tmp_path / "inference-repo"
    said = _run([specdec, "init", str(project), "--model", str(models["target"]),
                 "--draft-model", str(models["draft"])], tmp_path, env)  # fmt: skip
    assert f"wrote {project / 'suites' / 'specdec.toml'}" in said
    prompts = [{"id": "count", "prompt": "Count from one to twenty in words."},
               {"id": "sky", "prompt": "Why is the sky blue? One sentence."}]  # fmt: skip
    (project / "two.jsonl").write_text("\n".join(json.dumps(p) for p in prompts))
    with (project / "conftest.py").open("a", encoding="utf-8") as conftest:
        conftest.write(SHOW_PLUGIN)
    pytest_ = [python, "-m", "pytest", "-p", "no:cacheprovider", "--spec-config",
               "baseline,draft-d16", *SHORT]  # fmt: skip

    first = _run([*pytest_, "suites/test_throughput.py", "--specdec-update-baselines"],
                 project, env)  # fmt: skip
    assert f"specdec plugin from {venv}" in first, first
    stored = sorted(p.relative_to(project) for p in (project / "baselines").rglob("*.json"))
    assert len(stored) == 2, first  # one per config, in the folder's baselines/

    # The rerun through the package's own suite, judged against those baselines. It fails only
    # on accept length, which greedy decoding repeats: two runs' speeds need not agree.
    rerun = _run([*pytest_, "--pyargs", "pytest_specdec.suites.test_throughput",
                  "--specdec-fail-on", "accept-regressed", "--specdec-results", "r.json"],
                 project, env)  # fmt: skip
    assert f"specdec plugin from {venv}" in rerun and "passed" in rerun, rerun
    verdicts = json.loads((project / "r.json").read_text())["verdicts"]
    assert {v["config"] for v in verdicts} == {"baseline", "draft-d16"}, verdicts
    judged = {v["config"]: v for v in verdicts}
    assert {v["status"] for v in verdicts} == {"judged"}, verdicts  # found their baselines
    acceptance = judged["draft-d16"]["acceptance"]
    assert acceptance["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), acceptance["message"]
    assert sorted(p.relative_to(project) for p in (project / "baselines").rglob("*.json")) == (
        stored
    )  # judging writes nothing
