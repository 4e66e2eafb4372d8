"""``specdec init [DIR]``: lay out a repository to run the suite, as this repository is laid out.

Writes ``suites/`` (the test files and a suite file for one engine and its models),
``conftest.py``, ``baselines/``, ``.github/workflows/`` (the nightly with its merged report and
dashboard, and the baseline update) and ``SPECDEC.md``. It never overwrites a file: when any
file it would write is there, it names them all and writes nothing, unless ``--force``: then
it replaces them (a symbolic link itself, not the file it points to), every file or none.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_specdec.cli.layout import (
    CONFTEST,
    ENGINES,
    Layout,
    check_configs,
    parse_draft,
    readme,
    suite_file,
    suite_tests,
)
from pytest_specdec.cli.workflows import TemplateError, workflows
from pytest_specdec.core.configs import ConfigError, split_names
from pytest_specdec.core.results import replaced_mode

LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def runner_labels(value: str) -> tuple[str, ...]:
    """``--runner-labels``: a JSON list of runner labels, e.g. '["self-hosted", "gpu"]'."""
    try:
        found = json.loads(value)
    except json.JSONDecodeError:
        found = None
    if (
        not isinstance(found, list)
        or not found
        or not all(isinstance(x, str) and LABEL.fullmatch(x) for x in found)
    ):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give a JSON list of runner labels (letters, digits, '.', '_', '-'), "
            """e.g. '["self-hosted", "linux", "gpu"]'"""
        )
    return tuple(found)


def from_suites(value: str, folder: Path) -> str:
    """A model path given relative to the current folder, and there, as the suite file reads
    it: relative to ``folder/suites/``. Anything else (an absolute path, a hub id) as given."""
    if Path(value).is_absolute() or not Path(value).exists():
        return value
    return os.path.relpath(Path(value).resolve(), (folder / "suites").resolve())


def layout_of(args: argparse.Namespace) -> Layout:
    drafts = {r: from_suites(p, args.dir) for r, p in map(parse_draft, args.draft_model)}
    configs = tuple(split_names([args.configs])) if args.configs else ()
    check_configs(args.engine, configs)
    model = from_suites(args.model, args.dir) if args.model else None
    return Layout(
        engine=args.engine, model=model, drafts=drafts,
        runner_labels=args.runner_labels, configs=configs,
    )  # fmt: skip


def files(layout: Layout) -> dict[str, str]:
    """Every file ``specdec init`` writes, by its path relative to the folder."""
    return {
        **suite_tests(),
        "suites/specdec.toml": suite_file(layout),
        "conftest.py": CONFTEST,
        "baselines/.gitkeep": "",
        **workflows(layout),
        "SPECDEC.md": readme(layout),
    }


def write(folder: Path, written: dict[str, str], force: bool) -> list[str]:
    """Write every file, or none: the paths that are there already are refused unless
    ``force``. Every file is first written to a temp file beside its place (``stage``); only
    when all are written are they renamed into place, each replacing what is there (a symbolic
    link itself, never the file it points to). Returns the lines to print."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file; give the folder to lay out")
    there = [name for name in written if (folder / name).exists() or (folder / name).is_symlink()]
    blocked = [name for name in there if (folder / name).is_dir()]
    if blocked:
        raise ConfigError(f"{folder}: {', '.join(blocked)} is a folder; move it aside")
    if there and not force:
        raise ConfigError(
            f"{folder} already has {', '.join(there)}; nothing was written. Move them aside, "
            "or pass --force to overwrite them"
        )
    try:
        staged = stage(folder, written)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {exc.filename}: {exc.strerror or exc}; nothing was written. Make "
            "room, or fix that path, and run it again"
        ) from None
    for index, (tmp, path) in enumerate(staged):
        try:
            os.replace(tmp, path)
        except BaseException:
            for left, _ in staged[index:]:
                left.unlink(missing_ok=True)
            raise
    return [f"{'overwrote' if name in there else 'wrote'} {folder / name}" for name in written]


def stage(folder: Path, written: dict[str, str]) -> list[tuple[Path, Path]]:
    """Every file written (and flushed to disk) to a temp file in its folder, with the
    permissions of the file it replaces (or a new file's): (temp file, place) pairs. If one
    cannot be written, the temp files and the folders made for them are removed again."""
    staged: list[tuple[Path, Path]] = []
    made: list[Path] = []
    try:
        for name, text in written.items():
            path = folder / name
            for parent in reversed([path.parent, *path.parent.parents]):
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((Path(temp), path))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(temp, replaced_mode(path))
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.filename is None:  # a write: name its file
            exc.filename = str(path)
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for parent in reversed(made):
            with contextlib.suppress(OSError):  # not empty: someone else wrote there meanwhile
                parent.rmdir()
        raise
    return staged


def run(args: argparse.Namespace) -> int:
    try:
        layout = layout_of(args)
        lines = write(args.dir, files(layout), args.force)
    except (ConfigError, TemplateError) as exc:
        print(f"specdec init: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    print(f"next: read {args.dir / 'SPECDEC.md'}; run `pytest suites --spec-config baseline`")
    return 0


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="write suites/, conftest.py, baselines/, workflows and SPECDEC.md into a repository",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", nargs="?", type=Path, default=Path("."),
                   help="the repository's folder (default: this one)")  # fmt: skip
    p.add_argument("--engine", choices=ENGINES, default="llamacpp",
                   help="the suite file's engine (default: llamacpp)")  # fmt: skip
    p.add_argument("--model", default=None,
                   help="the target model: a path or a hub id")  # fmt: skip
    p.add_argument(
        "--draft-model", action="append", default=[], metavar="[ROLE=]PATH",
        help="a draft model for the configs of that role (default role: draft; e.g. "
             "dflash=PATH, eagle3=PATH); repeat for more roles",
    )  # fmt: skip
    p.add_argument(
        "--configs", default=None, metavar="A,B",
        help="the nightly workflow's configs, presets of the engine (default: the engine's "
             "nightly presets whose draft model is given)",
    )  # fmt: skip
    p.add_argument(
        "--runner-labels", type=runner_labels, default=("self-hosted", "linux", "gpu"),
        metavar="JSON", help="""the GPU runner's labels ('["self-hosted", "linux", "gpu"]')""",
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="overwrite files that are there")
    p.set_defaults(func=run)
