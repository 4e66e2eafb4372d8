"""Which engines this process knows: every adapter registered under the entry-point group
``pytest_specdec.engines`` (the four built-in ones are registered there too, in
pyproject.toml), plus any that a pytest plugin adds through the ``pytest_specdec_engines``
hook. ``pip install some-engine-adapter`` adds an engine with no edit here.

An entry's value is the adapter class (``package.module:Class``): called with the suite's
engine settings (or None) it gives an object with the ``Engine`` Protocol of
:mod:`pytest_specdec.engines.base`. An adapter class whose ``speculative_configs`` is False
(``openai``: it measures a server someone else started) takes no spec configs of its own.

The table is read lazily, once per process: the entry points are listed on first use and an
adapter's module is imported when the engine is first asked for. An adapter whose module fails
to import breaks nothing but itself: the failure is kept (``EngineLoadError`` names the engine,
its distribution and the exception) and raised only where that engine is used; the rest of the
table works, and ``load_errors`` lists every such failure for the run's report and
``specdec doctor``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

GROUP = "pytest_specdec.engines"
BUILTIN = ("llamacpp", "sglang", "vllm", "openai")  # the adapters this package ships
ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")  # what an engine may be called


class EngineTableError(ValueError):
    """An engine name is unknown, malformed or registered twice; the text names the fix."""


class EngineLoadError(EngineTableError):
    """An engine adapter that failed to import; the text names it, who registered it, the
    exception, and the fix."""


@dataclass
class _Entry:
    name: str
    source: str  # where it came from, for messages: "entry point ..." or "pytest plugin ..."
    load: Callable[[], Any]
    fix: str  # what to do when it does not load
    loaded: Any = None
    error: str | None = None  # why it did not load ("KeyError: 'x'"), once tried

    def factory(self) -> Any:
        if self.loaded is None and self.error is None:
            try:
                self.loaded = self.load()
            except Exception as exc:  # an adapter's import error is the adapter's alone
                self.error = f"{type(exc).__name__}: {exc}"
        if self.error is not None:
            raise EngineLoadError(
                f"engine adapter {self.name!r} ({self.source}) failed to import: {self.error}; "
                f"{self.fix}"
            )
        return self.loaded


class EngineTable:
    """Engine name → adapter class, from entry points and plugins."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] | None = None

    def _all(self) -> dict[str, _Entry]:
        if self._entries is None:
            self._entries = {}
            for ep in metadata.entry_points(group=GROUP):
                dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
                source = f"entry point {ep.value} of distribution {dist}"
                fix = f"fix or uninstall {ep.dist.name if ep.dist is not None else ep.value}"
                self._put(ep.name, _Entry(ep.name, source, ep.load, fix))
            missing = [name for name in BUILTIN if name not in self._entries]
            if missing:
                raise EngineTableError(
                    f"the built-in engine(s) {', '.join(missing)} are not registered under the "
                    f"entry-point group {GROUP}: pytest-specdec's metadata is missing or stale; "
                    "reinstall it (pip install -e . in a checkout)"
                )
        return self._entries

    def _put(self, name: str, entry: _Entry) -> None:
        assert self._entries is not None
        if not ENGINE_NAME.match(name):
            raise EngineTableError(
                f"engine name {name!r} ({entry.source}): use lowercase letters, digits, - and _, "
                "starting with a letter"
            )
        known = self._entries.get(name)
        if known is not None and known.source != entry.source:
            raise EngineTableError(
                f"engine {name!r} is registered twice: by {known.source} and by {entry.source}; "
                "uninstall one, or register the second under another name"
            )
        self._entries[name] = entry

    def add(self, name: str, factory: Any, source: str) -> None:
        """Register ``factory`` (an adapter class) as ``name``; ``source`` names who did."""
        self._all()
        self._put(name, _Entry(name, source, lambda: factory, f"fix {source}"))

    def names(self) -> tuple[str, ...]:
        return tuple(self._all())

    def _entry(self, name: str) -> _Entry:
        entry = self._all().get(name)
        if entry is None:
            raise EngineTableError(
                f"unknown engine {name!r}; installed: {', '.join(self.names())} (an engine "
                f"adapter registers itself under the entry-point group {GROUP})"
            )
        return entry

    def factory(self, name: str) -> Any:
        return self._entry(name).factory()

    def source(self, name: str) -> str:
        """Who registered ``name`` (without importing its adapter)."""
        return self._entry(name).source

    def load_errors(self) -> dict[str, str]:
        """Engine name → why its adapter failed to import (every adapter is tried)."""
        errors = {}
        for name in self.names():
            try:
                self.factory(name)
            except EngineLoadError as exc:
                errors[name] = str(exc)
        return errors

    def config_engines(self, loaded_only: bool = False) -> tuple[str, ...]:
        """The engines spec configs can name: all but those measuring a foreign server. An
        adapter that failed to import is kept in (unless ``loaded_only``), so that a config
        naming it parses and the run that uses it is told why it cannot (``factory``
        raises)."""
        out = []
        for name in self.names():
            try:
                factory = self.factory(name)
            except EngineLoadError:
                if not loaded_only:
                    out.append(name)
                continue
            if getattr(factory, "speculative_configs", True):
                out.append(name)
        return tuple(out)


ENGINE_TABLE = EngineTable()
