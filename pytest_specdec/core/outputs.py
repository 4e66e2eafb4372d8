"""The paths a run writes, checked before it measures anything: a results file or report that
cannot be written, or that would replace a file it must not (another kind of file, another
run's results under a report's name), is refused with the flag, the path and the fix; it
would otherwise fail only at the end, after every measurement, or destroy that file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pytest_specdec.core.results import ResultsError, load_results


def output_problems(
    results: tuple[str, Path],
    reports: Mapping[str, Path | None],
    folders: Mapping[str, Path | None],
) -> list[str]:
    """Why the run could not write its outputs: ``results`` (flag, path), the report files
    by flag, and the folders it writes into by flag (None: not asked for). Empty: all
    writable as far as can be told before writing."""
    flag, path = results
    problems = [p for p in (_file_problem(flag, path), _replaces(flag, path, results=True)) if p]
    for name, report in reports.items():
        if report is None:
            continue
        found = _file_problem(name, report) or _replaces(name, report, results=False)
        if found is None and report.resolve() == path.resolve():
            found = f"{name} {report} is the results file ({flag}): name another file"
        if found is None and name == "--specdec-chart" and report.suffix.lower() != ".png":
            found = f"{name} {report}: the chart is a PNG; name the file .png"
        problems += [found] if found else []
    for name, folder in folders.items():
        if folder is not None and (found := _folder_problem(name, folder)):
            problems.append(found)
    return problems


def _blocking_file(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` where it is not a folder."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _under_file(flag: str, path: Path) -> str | None:
    blocker = _blocking_file(path)
    if blocker is None:
        return None
    return f"{flag} {path}: {blocker} is a file, not a folder: fix the path"


def _file_problem(flag: str, path: Path) -> str | None:
    if path.is_dir():
        return f"{flag} {path} is a folder: name a file in it, e.g. {path / 'results.json'}"
    return _under_file(flag, path)


def _folder_problem(flag: str, path: Path) -> str | None:
    if path.exists() and not path.is_dir():
        return f"{flag} {path} is a file, not a folder: name a folder"
    return _under_file(flag, path)


def results_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not a run's results (None: it is one)."""
    try:
        load_results(path)
    except ResultsError as exc:
        return str(exc)
    return None


def _replaces(flag: str, path: Path, results: bool) -> str | None:
    """The results file must be absent or a results file (an earlier run's, kept as
    ``.prev``); a report must not replace a results file."""
    if not path.is_file():
        return None
    problem = results_problem(path)
    if results and problem is not None:
        return (
            f"{flag} {path} exists and is not a pytest-specdec results file ({problem}); the "
            "run would replace it: name another path, or move that file aside"
        )
    if results or problem is not None:
        return None
    return f"{flag} {path} holds a run's results, which the report would replace: name another file"
