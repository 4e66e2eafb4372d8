"""The suite file (``suites/specdec.toml``): default engine, workload, models and engine settings.

::

    [suite]
    engine = "llamacpp"          # default for --specdec-engine
    workload = "seed"            # default for --specdec-workload
    ignore_eos = false           # true: every request decodes --specdec-max-tokens tokens
    score = "e2e"                # default for --specdec-score: "e2e" or "decode"
    concurrency = [1, 8, 32]     # default for --specdec-concurrency: the load levels
    rounds = 5                   # default for --specdec-rounds: measured rounds per level
    extends = "specdec.toml"     # optional: start from another suite file (below)
    baseline_dir = "baselines/load"  # default for --specdec-baseline-dir (rootdir-relative)

    [models.llamacpp]
    target = "~/.cache/pytest-specdec/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    drafts = { draft = "~/.cache/pytest-specdec/models/SmolLM2-135M-Instruct.Q4_0.gguf" }

    [engines.llamacpp]
    binary = "llama-server"      # optional; else $SPECDEC_LLAMA_SERVER, PATH, the set-up cache
    extra_args = ["-t", "2"]     # appended to every config of this engine
    startup_timeout_s = 120

    [configs.my-config]          # user configs, see configs.py

A file that ``extends`` another (a path relative to it) starts from that file's tables: its
own ``[suite]`` keys replace the other's, and so do the keys of each ``[models.E]``,
``[engines.E]`` and ``[configs.N]`` it names (a list such as ``extra_args`` is replaced whole,
never appended); everything else is the other file's. Model paths resolve against the file
that gives them. A chain of files may extend each other, never in a circle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_specdec.core.configs import ConfigError, read_toml
from pytest_specdec.core.engine_table import ENGINE_TABLE
from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.core.values import SCORES

SUITE_KEYS = {"suite", "models", "engines", "configs"}
SUITE_TABLE_KEYS = {
    "engine", "workload", "ignore_eos", "score", "concurrency", "rounds", "extends", "baseline_dir",
}  # fmt: skip
ENGINE_KEYS = {
    "binary", "python", "extra_args", "startup_timeout_s", "env", "api", "interfaces", "freeze_gc",
}  # fmt: skip


@dataclass(frozen=True)
class ModelSet:
    """The target model and draft models (by role) for one engine."""

    target: str | None = None
    drafts: Mapping[str, str] = field(default_factory=dict)
    where: str = "suites/specdec.toml"

    def draft_for(self, role: str, engine: str) -> str:
        try:
            return self.drafts[role]
        except KeyError:
            raise ConfigError(
                f"no draft model for role {role!r} of engine {engine}: set "
                f'[models.{engine}] drafts = {{ {role} = "PATH" }} in {self.where} '
                "or pass --specdec-draft-model PATH"
            ) from None


@dataclass(frozen=True)
class EngineSettings:
    binary: str | None = None
    python: str | None = None
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 600.0
    env: Mapping[str, str] = field(default_factory=dict)
    api: str = "chat"  # "chat" (OpenAI streaming chat) | "native" (engine-native endpoint)
    # extra_args for engine builds that name these flags otherwise (an older release, a fork):
    # name -> args. The first set the installed engine's own lint accepts is booted.
    interfaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # After the warm-up, before anything is measured: the engine's processes stop scanning the
    # objects they hold so far in their garbage collections (SGLang's /freeze_gc), so that no
    # full collection of a process holding its framework's millions of objects pauses it
    # mid-measurement. Part of the baseline key (the results say it was done).
    freeze_gc: bool = False

    def variants(self) -> list[tuple[str, EngineSettings]]:
        """These settings as each interface has them, its own extra_args first."""
        own = replace(self, interfaces={})
        return [("default", own)] + [
            (name, replace(own, extra_args=args)) for name, args in self.interfaces.items()
        ]


@dataclass(frozen=True)
class SuiteSettings:
    engine: str = "llamacpp"
    workload: str = "seed"
    ignore_eos: bool = False
    score: str = "e2e"
    concurrency: tuple[int, ...] = ()  # load levels (suites/test_concurrency.py)
    rounds: int | None = None  # measured rounds per load level (None: the option's default)
    models: Mapping[str, ModelSet] = field(default_factory=dict)
    engines: Mapping[str, EngineSettings] = field(default_factory=dict)
    path: Path | None = None
    files: tuple[Path, ...] = ()  # the files it was read from, the one it extends first
    # Where its baselines live (relative to the rootdir): a suite whose engine settings differ
    # from another's keeps its own, since a baseline file is refused under another key.
    baseline_dir: str | None = None

    def models_for(self, engine: str) -> ModelSet:
        return self.models.get(engine, ModelSet(where=str(self.path or "suites/specdec.toml")))

    def engine_settings(self, engine: str) -> EngineSettings:
        return self.engines.get(engine, EngineSettings())


def builtin_suite_file() -> Path:
    """The built-in suite's own suite file, ``pytest_specdec/suites/specdec.toml``."""
    return Path(str(resources.files("pytest_specdec") / "suites" / "specdec.toml"))


def default_suite_file(root: Path) -> Path:
    """The suite file a run reads when none is named: ``suites/specdec.toml`` under ``root``
    (the layout ``specdec init`` writes, and this repository's), else the built-in one, so
    that ``pytest --pyargs pytest_specdec.suites`` runs in any folder."""
    own = root / "suites" / "specdec.toml"
    return own if own.is_file() else builtin_suite_file()


def with_engine_args(suite: SuiteSettings, args: Sequence[str]) -> SuiteSettings:
    """``suite`` with ``args`` appended to every engine's extra_args (--specdec-engine-args)."""
    if not args:
        return suite
    engines = {e: suite.engine_settings(e) for e in ENGINE_TABLE.config_engines()}
    return replace(suite, engines={e: replace(s, extra_args=(*s.extra_args, *args))
                                   for e, s in engines.items()})  # fmt: skip


def resolve_model_path(value: str, base: Path | None) -> str:
    """Expand ``~``, ``$SPECDEC_CACHE`` (its default, ``~/.cache/pytest-specdec``, when unset)
    and other variables; relative file paths are relative to the suite file; hub ids pass
    through."""
    for name in ("${SPECDEC_CACHE}", "$SPECDEC_CACHE"):
        value = value.replace(name, str(cache_root()))
    expanded = os.path.expandvars(os.path.expanduser(value))
    if expanded.startswith((".", "/")) or expanded.endswith(".gguf"):
        path = Path(expanded)
        if not path.is_absolute() and base is not None:
            path = base / path
        return str(path)
    return expanded


def _table(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{key}] must be a table, got {value!r}")
    return value


def _check_engine(name: str, where: str) -> None:
    engines = ENGINE_TABLE.config_engines()
    if name not in engines:
        raise ConfigError(f"{where}: unknown engine {name!r}; valid: {', '.join(engines)}")


def _models(doc: Mapping[str, Any], where: str, base: Path | None) -> dict[str, ModelSet]:
    out: dict[str, ModelSet] = {}
    for engine, table in _table(doc, "models", where).items():
        _check_engine(engine, f"{where} [models]")
        if not isinstance(table, dict):
            raise ConfigError(f"{where} [models.{engine}] must be a table")
        target = table.get("target")
        drafts = table.get("drafts", {})
        if target is not None and not isinstance(target, str):
            raise ConfigError(f"{where} [models.{engine}] target must be a string, got {target!r}")
        if not isinstance(drafts, dict) or not all(isinstance(v, str) for v in drafts.values()):
            raise ConfigError(f'{where} [models.{engine}] drafts must map role = "path"')
        out[engine] = ModelSet(
            target=resolve_model_path(target, base) if target else None,
            drafts={k: resolve_model_path(v, base) for k, v in drafts.items()},
            where=where,
        )
    return out


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ConfigError(f"{what} must be a list of strings, got {value!r}")
    return value


def _engines(doc: Mapping[str, Any], where: str) -> dict[str, EngineSettings]:
    out: dict[str, EngineSettings] = {}
    for engine, table in _table(doc, "engines", where).items():
        _check_engine(engine, f"{where} [engines]")
        loc = f"{where} [engines.{engine}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{loc} must be a table")
        unknown = sorted(set(table) - ENGINE_KEYS)
        if unknown:
            raise ConfigError(f"{loc}: unknown key(s) {unknown}; valid: {sorted(ENGINE_KEYS)}")
        extra = _strings(table.get("extra_args", []), f"{loc}: extra_args")
        interfaces = table.get("interfaces", {})
        if not isinstance(interfaces, dict):
            raise ConfigError(
                f"{loc}: interfaces must be tables, [engines.{engine}.interfaces.NAME]"
            )
        alternatives: dict[str, tuple[str, ...]] = {}
        for name, alt in interfaces.items():
            where_alt = f"{loc.removesuffix(']')}.interfaces.{name}]"
            if not isinstance(alt, dict) or set(alt) != {"extra_args"}:
                raise ConfigError(f"{where_alt}: give exactly one key, extra_args = [...]")
            alternatives[str(name)] = tuple(_strings(alt["extra_args"], f"{where_alt}: extra_args"))
        timeout = table.get("startup_timeout_s", 600.0)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(
                f"{loc}: startup_timeout_s must be a positive number, got {timeout!r}"
            )
        api = table.get("api", "chat")
        if api not in ("chat", "native"):
            raise ConfigError(f'{loc}: api = {api!r}; valid: "chat" or "native"')
        freeze = table.get("freeze_gc", False)
        if not isinstance(freeze, bool):
            raise ConfigError(f"{loc}: freeze_gc = {freeze!r}; give true or false")
        out[engine] = EngineSettings(
            api=api,
            freeze_gc=freeze,
            binary=table.get("binary"),
            python=table.get("python"),
            extra_args=tuple(extra),
            interfaces=alternatives,
            startup_timeout_s=float(timeout),
            env={str(k): str(v) for k, v in dict(table.get("env", {})).items()},
        )
    return out


def _chain(path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``path`` and the files it extends, the farthest first, each with its document."""
    out: list[tuple[Path, dict[str, Any]]] = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        resolved = current.resolve()
        if resolved in seen:
            circle = " -> ".join(str(p) for p in [*seen, resolved])
            raise ConfigError(f"suite files extend each other in a circle: {circle}")
        seen.append(resolved)
        if not current.is_file():
            raise ConfigError(
                f"{out[0][0] if out else path} [suite] extends = {str(current)!r}: no such file; "
                "give a suite file's path relative to the file that extends it"
            )
        doc = read_toml(current)
        out.insert(0, (current, doc))
        parent = _table(doc, "suite", str(current)).get("extends")
        if parent is not None and not isinstance(parent, str):
            raise ConfigError(f"{current} [suite] extends = {parent!r}: give a file path string")
        current = Path(os.path.normpath(current.parent / parent)) if parent else None
    return out


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top``'s tables over ``base``'s: [suite] by key, the others by name and then by key."""
    out: dict[str, Any] = {k: v for k, v in base.items()}
    for key, table in top.items():
        if not isinstance(table, dict) or not isinstance(out.get(key), dict):
            out[key] = table
        elif key == "suite":
            out[key] = {**out[key], **table}
        else:
            merged = dict(out[key])
            for name, inner in table.items():
                old = merged.get(name)
                both = isinstance(old, dict) and isinstance(inner, dict)
                merged[name] = {**old, **inner} if both else inner  # type: ignore[dict-item]
            out[key] = merged
    return out


def _positive_levels(value: Any, where: str) -> tuple[int, ...]:
    ok = (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    )
    if not ok:
        raise ConfigError(
            f"{where} [suite] concurrency = {value!r}: give a list of client counts >= 1, "
            "e.g. [1, 8, 32]"
        )
    return tuple(sorted(set(value)))


def _suite_table(suite: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The [suite] table's values, checked."""
    unknown = sorted(set(suite) - SUITE_TABLE_KEYS)
    if unknown:
        raise ConfigError(
            f"{where} [suite]: unknown key(s) {unknown}; valid: {sorted(SUITE_TABLE_KEYS)}"
        )
    engine = suite.get("engine", "llamacpp")
    _check_engine(engine, f"{where} [suite] engine")
    ignore_eos = suite.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ConfigError(
            f"{where} [suite] ignore_eos = {ignore_eos!r}: write true or false (true decodes "
            "--specdec-max-tokens tokens per request, past the end of the answer)"
        )
    score = suite.get("score", "e2e")
    if score not in SCORES:
        raise ConfigError(
            f'{where} [suite] score = {score!r}: write "e2e" (each request\'s output tok/s) or '
            '"decode" (its decode tok/s, 1 / TPOT)'
        )
    rounds = suite.get("rounds")
    if rounds is not None and (not isinstance(rounds, int) or isinstance(rounds, bool)
                               or rounds < 2):  # fmt: skip
        raise ConfigError(
            f"{where} [suite] rounds = {rounds!r}: give a whole number >= 2 (a level's rounds "
            "are what its confidence interval is made from)"
        )
    levels = suite.get("concurrency")
    baselines = suite.get("baseline_dir")
    if baselines is not None and (not isinstance(baselines, str) or not baselines.strip()):
        raise ConfigError(
            f"{where} [suite] baseline_dir = {baselines!r}: give a folder path, relative to the "
            'rootdir, e.g. "baselines/load"'
        )
    return {
        "baseline_dir": baselines,
        "engine": engine, "workload": str(suite.get("workload", "seed")),
        "ignore_eos": ignore_eos, "score": score, "rounds": rounds,
        "concurrency": _positive_levels(levels, where) if levels is not None else (),
    }  # fmt: skip


def load_suite_settings(path: Path | None) -> SuiteSettings:
    """Read a suite file (and the files it extends); ``None`` or a missing default file gives
    the built-in defaults."""
    if path is None or not path.exists():
        return SuiteSettings()
    chain = _chain(path)
    doc: dict[str, Any] = {}
    models: dict[str, ModelSet] = {}
    for file, part in chain:
        unknown = sorted(set(part) - SUITE_KEYS)
        if unknown:
            raise ConfigError(f"{file}: unknown table(s) {unknown}; valid: {sorted(SUITE_KEYS)}")
        for engine, found in _models(part, str(file), file.parent).items():
            old = models.get(engine)
            given = _table(part, "models", str(file))[engine]
            models[engine] = ModelSet(
                target=found.target if "target" in given or old is None else old.target,
                drafts=found.drafts if "drafts" in given or old is None else old.drafts,
                where=str(file),
            )
        doc = _merge(doc, part)
    where = " extending ".join(str(f) for f, _ in reversed(chain))
    return SuiteSettings(
        **_suite_table(_table(doc, "suite", where), where),
        models=models,
        engines=_engines(doc, where),
        path=path,
        files=tuple(f for f, _ in chain),
    )
