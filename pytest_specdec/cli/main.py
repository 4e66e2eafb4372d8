"""The ``specdec`` command: configs, baselines, compare, reports, history, doctor, init. Thin:
the logic lives in the modules it calls."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_specdec.cli.bisect import add_command as add_bisect
from pytest_specdec.cli.doctor import run as run_doctor
from pytest_specdec.cli.history import add_command as add_history
from pytest_specdec.cli.init import add_command as add_init
from pytest_specdec.cli.results import ERRORS as RESULT_ERRORS
from pytest_specdec.cli.results import add_commands
from pytest_specdec.core.configs import ConfigError, Registry, load_registry
from pytest_specdec.core.engine_table import ENGINE_TABLE, EngineTableError
from pytest_specdec.core.suitefile import SuiteSettings, default_suite_file, load_suite_settings
from pytest_specdec.core.values import engine_name
from pytest_specdec.engines import EngineNotInstalled, make_engine
from pytest_specdec.engines.base import BootContext
from pytest_specdec.engines.lint import LintUnavailable, errors


def _registry(args: argparse.Namespace) -> Registry:
    return load_registry([*_suite().files, *args.config_file])


def cmd_configs_list(args: argparse.Namespace) -> int:
    configs = _registry(args).all(args.engine)
    if not configs and args.engine is not None:
        engines = ENGINE_TABLE.config_engines()
        known = "" if args.engine in engines else f" (unknown; engines: {', '.join(engines)})"
        raise ConfigError(f"no configs for engine {args.engine!r}{known}")
    for cfg in configs:
        print(f"{cfg.qualified_name:28} {cfg.description}")
    return 0


def cmd_configs_show(args: argparse.Namespace) -> int:
    cfg = _registry(args).resolve(args.name, args.engine or "llamacpp")
    print(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    return 0


def cmd_configs_lint(args: argparse.Namespace) -> int:
    """Check a config's flags against the installed engine; exit 1 on any finding."""
    cfg = _registry(args).resolve(args.name, args.engine or "llamacpp")
    suite = _suite()
    engine = make_engine(cfg.engine, suite.engine_settings(cfg.engine))
    draft = "DRAFT_MODEL" if cfg.draft else None
    interfaces = [cfg.interface, *cfg.alternatives]
    taken = []
    installed: str | None = None  # the engine's version, asked once
    for interface in interfaces:  # a config with alternatives boots the first one taken
        variant = cfg.with_interface(interface)
        ctx = BootContext(variant, "TARGET_MODEL", draft, "127.0.0.1", 30000)
        try:
            findings = engine.lint(engine.build_command(ctx))
        except (LintUnavailable, EngineNotInstalled) as exc:
            print(f"specdec: cannot lint {cfg.qualified_name}: {exc}", file=sys.stderr)
            return 3
        installed = installed or engine.lint_version() or engine.name
        name = cfg.qualified_name + (f" (interface {interface})" if len(interfaces) > 1 else "")
        for finding in findings:
            print(f"{name}: {finding} (checked against {installed})")
        wrong = errors(findings)
        if wrong and interface != "upstream":
            print(f"{name}: note: this config assumes interface {interface}")
        if not wrong:
            taken.append(interface)
            print(f"{name}: ok ({installed} accepts every flag)")
    if taken and len(interfaces) > 1:
        print(f"{cfg.qualified_name}: boots with interface {taken[0]}")
    return 0 if taken else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="pytest-specdec tools")
    sub = parser.add_subparsers(dest="command", required=True)
    configs = sub.add_parser("configs", help="list or show spec configs").add_subparsers(
        dest="action", required=True
    )
    for name, func, helptext in (
        ("list", cmd_configs_list, "list known configs (presets + suites/specdec.toml + files)"),
        ("show", cmd_configs_show, "show one config as JSON"),
        ("lint", cmd_configs_lint, "check a config's flags against the installed engine"),
    ):
        p = configs.add_parser(name, help=helptext)
        p.add_argument("--engine", type=engine_name, default=None, help="only this engine")
        p.add_argument(
            "--config-file", action="append", type=Path, default=[], help="extra config TOML"
        )
        if name in ("show", "lint"):
            p.add_argument("name", help="config name (engine:name or name within --engine)")
        p.set_defaults(func=func)
    add_commands(sub)
    add_history(sub)
    add_bisect(sub)
    add_init(sub)
    doctor = sub.add_parser("doctor", help="engines, NVML and GPUs, docker: what is usable here")
    doctor.set_defaults(func=lambda args: run_doctor(_suite()))
    return parser


def _suite() -> SuiteSettings:
    """suites/specdec.toml here, else the built-in suite's (as a pytest run in this folder)."""
    return load_suite_settings(default_suite_file(Path.cwd()))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "doctor":  # doctor lists them itself
        for error in ENGINE_TABLE.load_errors().values():  # an error only where it is used
            print(f"specdec: warning: {error}", file=sys.stderr)
    try:
        return int(args.func(args))
    except (ConfigError, EngineTableError, *RESULT_ERRORS) as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (``| head``): quiet, as a shell tool is
        with contextlib.suppress(OSError, ValueError):  # no more writes reach the pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as exc:  # a path that cannot be read or written: named, no traceback
        print(f"specdec: error: {os_error(exc)}", file=sys.stderr)
        return 2


def os_error(exc: OSError) -> str:
    """An OSError as one line: the path (of a rename, the one renamed onto), the reason and
    what to check."""
    path = exc.filename2 if exc.filename2 is not None else exc.filename
    if path is None:
        return str(exc)
    return (
        f"{path}: {exc.strerror or exc}; check the path: its folders must be folders (not "
        "files), and writable where it is written"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
