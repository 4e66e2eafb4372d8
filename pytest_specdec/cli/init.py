"""``specdec init [DIR]``: lay out a repository to run the suite, as this repository is laid out.

Writes ``suites/`` (the test files and a suite file for one engine and its models),
``conftest.py``, ``baselines/``, ``.github/workflows/`` (the nightly with its merged report and
dashboard, and the baseline update) and ``SPECDEC.md``. It never overwrites a file: when any
file it would write is there, it names them all and writes nothing, unless ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
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
    ``force``. Returns the lines to print."""
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
    for name, text in written.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return [f"{'overwrote' if name in there else 'wrote'} {folder / name}" for name in written]


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
