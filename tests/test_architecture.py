"""The package's shape, checked: layers import only downward (import-linter contracts in
pyproject.toml, also run by .ci/run), no import circles, no private names imported across
modules, no module past the size one reading holds (docs/architecture.md). The lab
(``specdec_lab``: "the lab's layers") is held to the same rules, and the plugin never imports
it; ``scripts/`` holds the lab's entry points only."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_specdec"
LAB = ROOT / "specdec_lab"
ROOTS = ("pytest_specdec", "specdec_lab")
MAX_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_TOP_LEVEL = 12
# Code outside the package and the lab that imports them (the suites, the bench, the scripts).
USERS = [ROOT / "suites", ROOT / "bench", ROOT / "scripts"]
# What scripts/ holds in Python: the lab's launcher and the engine-side sitecustomize shim.
SCRIPTS_PYTHON = {"lab.py", "sglang_inject/sitecustomize.py"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def lab_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(LAB.rglob("*.py"))}


def all_modules() -> dict[str, Path]:
    return {**package_modules(), **lab_modules()}


def imports_of(path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(module, imported name or None, line) of every absolute import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name, node.lineno


def internal_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the package modules it imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for module, imported, _ in imports_of(path):
            target = f"{module}.{imported}" if f"{module}.{imported}" in modules else module
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_imports(paths: list[Path]) -> list[str]:
    """``from pytest_specdec.x import _name`` (or ``specdec_lab.x``) anywhere but in ``x``."""
    out = []
    for path in paths:
        inside = path.is_relative_to(PACKAGE) or path.is_relative_to(LAB)
        own = module_name(path) if inside else None
        for module, imported, line in imports_of(path):
            if not module.startswith(ROOTS) or module == own:
                continue
            if imported and imported.startswith("_") and not imported.startswith("__"):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{line}: {module}.{imported}")
    return out


def test_no_import_circles() -> None:
    assert cycles(internal_graph(all_modules())) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_private_name_is_imported_from_another_module() -> None:
    users = [p for folder in USERS for p in folder.rglob("*.py")]
    users += [ROOT / "scripts" / "build-sglang-fork-wheel", ROOT / "noxfile.py"]
    assert private_imports([*all_modules().values(), *users]) == []


def test_private_import_check_sees_one(tmp_path: Path) -> None:
    bad = PACKAGE / "core" / "results.py"  # read only: the checker is given a copy's path
    copy = tmp_path / "user.py"
    copy.write_text(bad.read_text() + "\nfrom pytest_specdec.driver.boot import _hidden\n")
    assert private_imports([copy]) == [f"{copy}:{len(copy.read_text().splitlines())}: "
                                       "pytest_specdec.driver.boot._hidden"]  # fmt: skip
    copy.write_text("from specdec_lab.installs.probe import _hidden\n")
    assert private_imports([copy]) == [f"{copy}:1: specdec_lab.installs.probe._hidden"]


def test_no_module_is_too_long_to_read_at_once() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in all_modules().values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these (limit {MAX_LINES} lines): {long}"


def test_no_function_in_the_package_is_over_sixty_lines() -> None:
    long = {
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}": size
        for p in package_modules().values()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (size := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert long == {}, f"split these (limit {MAX_FUNCTION_LINES} lines): {long}"


def test_session_means_a_server_session_and_options_the_flags() -> None:
    """The glossary of docs/architecture.md, checked: no name in the package uses "session"
    for anything but a server session (pytest's ``scope="session"`` and the
    ``pytest_sessionfinish`` argument are pytest's API), and "options" is only the flags."""
    words = {"GpuSession", "RunOptions", "GpuOptions", "finish_session", "gpu_session"}
    found = {
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in package_modules().values()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if any(w in line for w in words) or "pytest session" in line.lower()
    }
    assert found == set(), sorted(found)
    assert not (PACKAGE / "session").exists() and (PACKAGE / "driver" / "settings.py").is_file()


def test_top_level_is_the_pytest_face_and_the_layers() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)
    assert len(packages) >= 3, sorted(packages)
    for name in packages:  # each layer says what it owns and what it may import
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and "import" in doc, f"pytest_specdec/{name}/__init__.py needs its docstring"


def contracts() -> list[dict[str, Any]]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found: list[dict[str, Any]] = config["contracts"]
    return found


def contracted_layers(container: str = "pytest_specdec") -> set[str]:
    top = next(c for c in contracts() if c.get("containers") == [container])
    return {name.strip() for layer in top["layers"] for name in layer.split("|")}


def children(package: Path) -> set[str]:
    found = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return found | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def test_every_top_level_module_and_package_is_in_a_layer() -> None:
    assert contracted_layers() == children(PACKAGE)


def test_the_lab_is_in_layers_and_uses_only_the_plugins_core() -> None:
    """Every part of the lab is in one of its layers, and each subpackage's docstring says what
    it owns and what it may import; the contract that keeps the lab to ``pytest_specdec.core``
    names every other part of the plugin, and the plugin imports nothing of the lab."""
    assert contracted_layers("specdec_lab") == children(LAB)
    for name in children(LAB) - {"inject"}:
        doc = ast.get_docstring(ast.parse((LAB / name / "__init__.py").read_text()))
        assert doc and "import" in doc, f"specdec_lab/{name}/__init__.py needs its docstring"
    forbidden = {c["name"]: c for c in contracts() if c["type"] == "forbidden"}
    lab = forbidden["the lab uses the plugin's core only"]
    assert lab["source_modules"] == ["specdec_lab"]
    assert {m.removeprefix("pytest_specdec.") for m in lab["forbidden_modules"]} == children(
        PACKAGE
    ) - {"core"}
    plugin = forbidden["the plugin never imports the lab"]
    assert (plugin["source_modules"], plugin["forbidden_modules"]) == ([ROOTS[0]], [ROOTS[1]])


def test_scripts_hold_the_labs_entry_points_only() -> None:
    """No module of the lab is left in scripts/: its Python is the launcher and the
    sitecustomize shim, and every wrapper that runs the launcher names a command of the lab."""
    scripts = ROOT / "scripts"
    python = {str(p.relative_to(scripts)) for p in scripts.rglob("*.py")}
    assert python == SCRIPTS_PYTHON
    for name in SCRIPTS_PYTHON:
        assert len((scripts / name).read_text().splitlines()) <= 30, f"scripts/{name}: keep it thin"
    wrappers = {p.name: p.read_text(errors="replace") for p in scripts.iterdir()
                if p.is_file() and p.suffix != ".py"}  # fmt: skip
    launched = {name: re.findall(r"/lab\.py\" *\\?\s*([\w.]+)", text)
                for name, text in wrappers.items() if "/lab.py" in text}  # fmt: skip
    assert len(launched) == 5, sorted(launched)
    for name, modules in launched.items():
        assert len(modules) == 1 and modules[0].startswith("specdec_lab.cli."), (name, modules)
        assert (ROOT / f"{modules[0].replace('.', '/')}.py").is_file(), (name, modules)


@pytest.mark.parametrize(
    "command",
    ["make-dflash-drafter", "make-memory-bound-models", "make-sglang-drafters", "gguf-to-hf",
     "sglang-wheelhouse", "build-sglang-fork-wheel"],
)  # fmt: skip
def test_each_lab_command_runs_from_a_plain_checkout(command: str, tmp_path: Path) -> None:
    """The GPU runner runs these from a copied checkout with its own python3, where nothing is
    installed: each wrapper puts the repository root on its interpreter's path itself (nothing
    installs ``specdec_lab`` anywhere, so a wrapper that did not would fail to import it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHON": sys.executable, "SGLANG_WHEELHOUSE_PYTHON": sys.executable}
    done = subprocess.run([str(ROOT / "scripts" / command), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")


LINT_IMPORTS = shutil.which("lint-imports")


@pytest.mark.skipif(
    LINT_IMPORTS is None, reason="import-linter not installed (pip install -e .[dev])"
)
def test_layer_contracts_hold_and_catch_an_upward_import(tmp_path: Path) -> None:
    def lint(root: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
            cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    kept = lint(ROOT)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    shutil.copytree(PACKAGE, tmp_path / "pytest_specdec")
    shutil.copytree(LAB, tmp_path / "specdec_lab")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    results = tmp_path / "pytest_specdec" / "core" / "results.py"
    results.write_text(results.read_text() + "\nimport pytest_specdec.driver.runner\n")
    # and the lab's rules: the plugin reaching into the lab, the lab's base reaching up into
    # its models, the lab past the plugin's core
    measure = tmp_path / "pytest_specdec" / "measure" / "roofline.py"
    measure.write_text(measure.read_text() + "\nimport specdec_lab.formats.folder\n")
    folder = tmp_path / "specdec_lab" / "formats" / "folder.py"
    folder.write_text(folder.read_text() + "\nimport specdec_lab.models.hf_layout\n")
    seeded = tmp_path / "specdec_lab" / "drafters" / "seeded.py"
    seeded.write_text(seeded.read_text() + "\nimport pytest_specdec.verdict.stats\n")
    broken = lint(tmp_path)
    assert broken.returncode != 0
    assert "pytest_specdec.core.results -> pytest_specdec.driver.runner" in broken.stdout
    assert "pytest_specdec.measure.roofline -> specdec_lab.formats.folder" in broken.stdout
    assert "specdec_lab.formats.folder -> specdec_lab.models.hf_layout" in broken.stdout
    assert "specdec_lab.drafters.seeded -> pytest_specdec.verdict.stats" in broken.stdout
