"""Speculative-decoding configs: the model, the built-in presets and user TOML files.

A config names an engine and the flags/environment that turn speculation on. Presets ship
in ``pytest_specdec/presets/<engine>.toml``; users add or override configs in
``suites/specdec.toml`` or any file given with ``--specdec-config-file``::

    [configs.my-config]
    engine = "llamacpp"            # sglang | vllm | llamacpp
    args = ["--spec-draft-n-max", "8"]
    env = { SOME_VAR = "1" }
    draft = "draft"                # optional: the draft-model role this config needs
    description = "..."
    interface = "upstream"         # which engine interface the flags assume
    flush = "run"                  # optional: reset the engine's caches before each request
                                   # ("run") or before each prompt's first ("prompt")
    [configs.my-config.interfaces.other-build]  # optional: the same config where an engine
    args = ["--other-flag"]                     # build has another interface (the first one
    env = {}                                    # the installed engine accepts is booted)

Names resolve within one engine (``draft-d16``) or qualified (``llamacpp:draft-d16``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_specdec.core.engine_table import ENGINE_TABLE
from pytest_specdec.core.values import masked

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

PRESET_ENGINES = ("llamacpp", "sglang", "vllm")  # the engines with shipped preset configs
CONFIG_KEYS = {
    "engine",
    "args",
    "env",
    "draft",
    "description",
    "interface",
    "speculative_config",
    "model",
    "draft_model",
    "flush",
    "interfaces",
}
INTERFACE_KEYS = {"args", "env"}
# When the engine's caches (prefix/KV cache, n-gram store) are reset: before every request, or
# before each prompt's first request (its warm-up), which puts every prompt's cached KV at the
# same place on every boot.
FLUSH_MODES = ("run", "prompt")


class ConfigError(ValueError):
    """A config file or config name is invalid; the message names the file, key and fix."""


SPEC_FLAG_PREFIXES = ("--spec", "-md", "--model-draft")  # --speculative-*, llama.cpp --spec-*


def is_speculative(config: Mapping[str, Any]) -> bool:
    """Whether a config (its identity, or a results record's ``config``) speculates: a draft
    model, a speculative config (vLLM), or a speculation flag of any engine (``--speculative-*``
    for SGLang and vLLM, ``--spec-*`` and ``-md`` for llama.cpp). Other flags (slots, context)
    do not make a config speculative."""
    args = [str(a) for a in config.get("args") or []]
    return bool(
        config.get("draft")
        or config.get("speculative_config")
        or any(a.startswith(SPEC_FLAG_PREFIXES) for a in args)
    )


@dataclass(frozen=True)
class SpecConfig:
    """One speculative-decoding configuration of one engine."""

    name: str
    engine: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    draft: str | None = None
    description: str = ""
    interface: str = "upstream"
    speculative_config: Mapping[str, Any] | None = None
    model: str | None = None
    draft_model: str | None = None
    flush: str | None = None  # one of FLUSH_MODES, or None: the engine keeps its caches
    source: str = "preset"
    # The same config for engine builds with another interface: name -> (args, env). Not part
    # of its identity: the one booted becomes the config (with_interface), and that is keyed.
    alternatives: Mapping[str, tuple[tuple[str, ...], Mapping[str, str]]] = field(
        default_factory=dict
    )

    def with_interface(self, interface: str) -> SpecConfig:
        """This config as booted on an engine with ``interface``: its own args and env, or an
        alternative's; no alternatives left."""
        if interface == self.interface:
            return replace(self, alternatives={})
        try:
            args, env = self.alternatives[interface]
        except KeyError:
            known = ", ".join([self.interface, *self.alternatives])
            raise ConfigError(
                f"config {self.qualified_name} has no interface {interface!r}; it has {known}"
            ) from None
        return replace(self, args=args, env=env, interface=interface, alternatives={})

    @property
    def qualified_name(self) -> str:
        return f"{self.engine}:{self.name}"

    @property
    def speculative(self) -> bool:
        return is_speculative(self.identity())

    def identity(self) -> dict[str, Any]:
        """What defines the config's behaviour (not where it came from). ``flush`` only where
        set, so that configs without it keep the hash their baselines were stored under."""
        out = {
            "name": self.name,
            "engine": self.engine,
            "args": list(self.args),
            "env": dict(sorted(self.env.items())),
            "draft": self.draft,
            "interface": self.interface,
            "speculative_config": dict(self.speculative_config or {}),
        }
        if self.flush is not None:
            out["flush"] = self.flush
        return out

    @property
    def sha256(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The config as recorded: its identity (secret-looking env values hidden: the hash
        holds them), description, source and hash."""
        out = self.identity()
        out["env"] = masked(out["env"])
        out.update(description=self.description, source=self.source, sha256=self.sha256)
        if self.alternatives:
            out["alternatives"] = {
                name: {"args": list(args), "env": masked(dict(env))}
                for name, (args, env) in self.alternatives.items()
            }
        return out


def _str_list(value: Any, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(f"{where}: '{key}' must be a list of strings, got {value!r}")
    return tuple(str(v) for v in value)


def _str_map(value: Any, where: str, key: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' must be a table of strings, got {value!r}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigError(f"{where}: '{key}.{k}' must be a string, got {v!r}")
        out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _opt_str(value: Any, where: str, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: '{key}' must be a string, got {value!r}")


def parse_config(
    name: str, table: Any, where: str, default_engine: str | None = None
) -> SpecConfig:
    """Validate one ``[configs.NAME]`` table."""
    where = f"{where} [configs.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - CONFIG_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; "
            f"valid keys: {', '.join(sorted(CONFIG_KEYS))}"
        )
    engine = table.get("engine", default_engine)
    engines = ENGINE_TABLE.config_engines()
    if engine not in engines:
        raise ConfigError(
            f"{where}: engine = {engine!r} is not one of {', '.join(engines)}; "
            'set engine = "llamacpp" (or another installed engine)'
        )
    spec = table.get("speculative_config")
    if spec is not None and not isinstance(spec, dict):
        raise ConfigError(f"{where}: 'speculative_config' must be a table, got {spec!r}")
    flush = table.get("flush")
    if flush is not None and flush not in FLUSH_MODES:
        raise ConfigError(
            f'{where}: flush = {flush!r}; use "run" (reset the engine\'s caches before every '
            'request) or "prompt" (before each prompt\'s first request), or leave it out'
        )
    return SpecConfig(
        alternatives=_alternatives(table.get("interfaces", {}), where),
        name=name,
        engine=engine,
        args=_str_list(table.get("args", []), where, "args"),
        env=_str_map(table.get("env", {}), where, "env"),
        draft=_opt_str(table.get("draft"), where, "draft"),
        description=_opt_str(table.get("description"), where, "description") or "",
        interface=_opt_str(table.get("interface"), where, "interface") or "upstream",
        speculative_config=spec,
        model=_opt_str(table.get("model"), where, "model"),
        draft_model=_opt_str(table.get("draft_model"), where, "draft_model"),
        flush=flush,
        source=where.split(" [", 1)[0],
    )


def _alternatives(value: Any, where: str) -> dict[str, tuple[tuple[str, ...], Mapping[str, str]]]:
    """``[configs.NAME.interfaces.INTERFACE]`` tables: each its own args (and env)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'interfaces' must be a table of tables, got {value!r}")
    out: dict[str, tuple[tuple[str, ...], Mapping[str, str]]] = {}
    for interface, table in value.items():
        loc = f"{where} interfaces.{interface}"
        if not isinstance(table, dict) or "args" not in table:
            raise ConfigError(f"{loc}: expected a table with args = [...], got {table!r}")
        unknown = sorted(set(table) - INTERFACE_KEYS)
        if unknown:
            raise ConfigError(f"{loc}: unknown key(s) {', '.join(unknown)}; valid keys: args, env")
        out[str(interface)] = (
            _str_list(table["args"], loc, "args"),
            _str_map(table.get("env", {}), loc, "env"),
        )
    return out


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text ({exc}); TOML is UTF-8: "
                          "save it as UTF-8") from None  # fmt: skip
    try:
        doc: dict[str, Any] = tomllib.loads(text)
        return doc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def configs_from_document(
    doc: Mapping[str, Any], where: str, default_engine: str | None = None
) -> list[SpecConfig]:
    tables = doc.get("configs", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{where}: [configs] must be a table of tables")
    return [parse_config(str(n), t, where, default_engine) for n, t in tables.items()]


def preset_configs() -> list[SpecConfig]:
    out: list[SpecConfig] = []
    for engine in PRESET_ENGINES:
        ref = resources.files("pytest_specdec") / "presets" / f"{engine}.toml"
        doc = tomllib.loads(ref.read_text(encoding="utf-8"))
        out.extend(configs_from_document(doc, f"preset {engine}.toml", engine))
    return out


class Registry:
    """All known configs; later sources override earlier ones of the same engine and name."""

    def __init__(self, configs: Iterable[SpecConfig] = ()) -> None:
        self._by_key: dict[tuple[str, str], SpecConfig] = {}
        for cfg in configs:
            self.add(cfg)

    def add(self, cfg: SpecConfig) -> None:
        self._by_key[(cfg.engine, cfg.name)] = cfg

    def all(self, engine: str | None = None) -> list[SpecConfig]:
        return [c for (e, _), c in sorted(self._by_key.items()) if engine in (None, e)]

    def names(self, engine: str | None = None) -> list[str]:
        if engine is None:
            return [c.qualified_name for c in self.all()]
        return [c.name for c in self.all(engine)]

    def engines_having(self, name: str) -> list[str]:
        return sorted(e for e, n in self._by_key if n == name)

    def resolve(self, name: str, engine: str, any_engine: bool = False) -> SpecConfig:
        """Find ``name`` (or ``engine:name``); raise ConfigError listing the valid names. With
        ``any_engine`` (no engine was asked for), an unqualified name that ``engine`` lacks and
        exactly one other engine has resolves to that engine's config."""
        eng, _, short = name.rpartition(":")
        if not eng and any_engine and (engine, short) not in self._by_key:
            owners = self.engines_having(short)
            if len(owners) == 1:
                return self._by_key[(owners[0], short)]
            if owners:
                raise ConfigError(
                    f"spec config {name!r} exists for engines {', '.join(owners)}, not for "
                    f"{engine}; name one: {', '.join(f'{o}:{short}' for o in owners)}"
                )
        eng = eng or engine
        engines = ENGINE_TABLE.config_engines()
        if eng not in engines:
            raise ConfigError(
                f"unknown engine {eng!r} in config name {name!r}; engines: {', '.join(engines)}"
            )
        found = self._by_key.get((eng, short))
        if found is None:
            raise ConfigError(
                f"unknown spec config {name!r} for engine {eng}; valid names: "
                f"{', '.join(self.names(eng))} (or qualified: {', '.join(self.names())})"
            )
        return found


def load_registry(files: Iterable[Path], default_engine: str | None = None) -> Registry:
    reg = Registry(preset_configs())
    for path in files:
        for cfg in configs_from_document(read_toml(path), str(path), default_engine):
            reg.add(cfg)
    return reg


def split_names(values: Iterable[str]) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` keeping order, dropping duplicates and blanks."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out
