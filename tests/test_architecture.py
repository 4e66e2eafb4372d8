"""The package's shape, checked: layers import only downward (import-linter contracts in
pyproject.toml, also run by .ci/run), no import circles, no private names imported across
modules, no module past the size one reading holds (docs/architecture.md)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_specdec"
MAX_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_TOP_LEVEL = 12
# Code outside the package that imports it (the suites, the bench and model scripts).
USERS = [ROOT / "suites", ROOT / "bench", ROOT / "scripts"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


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
    """``from pytest_specdec.x import _name`` anywhere but in ``x`` itself."""
    out = []
    for path in paths:
        own = module_name(path) if path.is_relative_to(PACKAGE) else None
        for module, imported, line in imports_of(path):
            if not module.startswith("pytest_specdec") or module == own:
                continue
            if imported and imported.startswith("_") and not imported.startswith("__"):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{line}: {module}.{imported}")
    return out


def test_no_import_circles() -> None:
    assert cycles(internal_graph(package_modules())) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_private_name_is_imported_from_another_module() -> None:
    users = [p for folder in USERS for p in folder.rglob("*.py")]
    assert private_imports([*package_modules().values(), *users]) == []


def test_private_import_check_sees_one(tmp_path: Path) -> None:
    bad = PACKAGE / "core" / "results.py"  # read only: the checker is given a copy's path
    copy = tmp_path / "user.py"
    copy.write_text(bad.read_text() + "\nfrom pytest_specdec.driver.boot import _hidden\n")
    assert private_imports([copy]) == [f"{copy}:{len(copy.read_text().splitlines())}: "
                                       "pytest_specdec.driver.boot._hidden"]  # fmt: skip


def test_no_module_is_too_long_to_read_at_once() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in package_modules().values()
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


def contracted_layers() -> set[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    top = next(c for c in config["contracts"] if c["containers"] == ["pytest_specdec"])
    return {name.strip() for layer in top["layers"] for name in layer.split("|")}


def test_every_top_level_module_and_package_is_in_a_layer() -> None:
    children = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    children |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert contracted_layers() == children


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
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    results = tmp_path / "pytest_specdec" / "core" / "results.py"
    results.write_text(results.read_text() + "\nimport pytest_specdec.driver.runner\n")
    broken = lint(tmp_path)
    assert broken.returncode != 0
    assert "pytest_specdec.core.results -> pytest_specdec.driver.runner" in broken.stdout
