"""The suite file (``suites/specdec.toml``): default engine, workload, models and engine settings.

::

    [suite]
    engine = "llamacpp"          # default for --specdec-engine
    workload = "seed"            # default for --specdec-workload
    ignore_eos = false           # true: every request decodes --specdec-max-tokens tokens
    score = "e2e"                # default for --specdec-score: "e2e" or "decode"

    [models.llamacpp]
    target = "~/.cache/pytest-specdec/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    drafts = { draft = "~/.cache/pytest-specdec/models/SmolLM2-135M-Instruct.Q4_0.gguf" }

    [engines.llamacpp]
    binary = "llama-server"      # optional; else $SPECDEC_LLAMA_SERVER, PATH, the set-up cache
    extra_args = ["-t", "2"]     # appended to every config of this engine
    startup_timeout_s = 120

    [configs.my-config]          # user configs, see configs.py
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_specdec.core.configs import ConfigError, read_toml
from pytest_specdec.core.engine_table import ENGINE_TABLE
from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.core.values import SCORES

SUITE_KEYS = {"suite", "models", "engines", "configs"}
ENGINE_KEYS = {"binary", "python", "extra_args", "startup_timeout_s", "env", "api", "interfaces"}


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
    models: Mapping[str, ModelSet] = field(default_factory=dict)
    engines: Mapping[str, EngineSettings] = field(default_factory=dict)
    path: Path | None = None

    def models_for(self, engine: str) -> ModelSet:
        return self.models.get(engine, ModelSet(where=str(self.path or "suites/specdec.toml")))

    def engine_settings(self, engine: str) -> EngineSettings:
        return self.engines.get(engine, EngineSettings())


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
        out[engine] = EngineSettings(
            api=api,
            binary=table.get("binary"),
            python=table.get("python"),
            extra_args=tuple(extra),
            interfaces=alternatives,
            startup_timeout_s=float(timeout),
            env={str(k): str(v) for k, v in dict(table.get("env", {})).items()},
        )
    return out


def load_suite_settings(path: Path | None) -> SuiteSettings:
    """Read a suite file; ``None`` or a missing default file gives the built-in defaults."""
    if path is None or not path.exists():
        return SuiteSettings()
    doc = read_toml(path)
    where = str(path)
    unknown = sorted(set(doc) - SUITE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {unknown}; valid: {sorted(SUITE_KEYS)}")
    suite = _table(doc, "suite", where)
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
    return SuiteSettings(
        engine=engine,
        workload=str(suite.get("workload", "seed")),
        ignore_eos=ignore_eos,
        score=score,
        models=_models(doc, where, path.parent),
        engines=_engines(doc, where),
        path=path,
    )
