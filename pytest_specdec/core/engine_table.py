"""Which engines this process knows: every adapter registered under the entry-point group
``pytest_specdec.engines`` (the four built-in ones are registered there too, in
pyproject.toml), plus any that a pytest plugin adds through the ``pytest_specdec_engines``
hook. ``pip install some-engine-adapter`` adds an engine with no edit here.

An entry's value is the adapter class (``package.module:Class``): called with the suite's
engine settings (or None) it gives an object with the ``Engine`` Protocol of
:mod:`pytest_specdec.engines.base`. An adapter class whose ``speculative_configs`` is False
(``openai``: it measures a server someone else started) takes no spec configs of its own.

The table is read lazily, once per process: the entry points are listed on first use and an
adapter's module is imported only when that engine is asked for.
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


@dataclass
class _Entry:
    source: str  # where it came from, for messages: "entry point ..." or "pytest plugin ..."
    load: Callable[[], Any]
    loaded: Any = None

    def factory(self) -> Any:
        if self.loaded is None:
            self.loaded = self.load()
        return self.loaded


class EngineTable:
    """Engine name → adapter class, from entry points and plugins."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] | None = None

    def _all(self) -> dict[str, _Entry]:
        if self._entries is None:
            self._entries = {}
            for ep in metadata.entry_points(group=GROUP):
                dist = ep.dist.name if ep.dist is not None else "?"
                self._put(ep.name, _Entry(f"entry point {ep.value} ({dist})", ep.load))
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
        self._put(name, _Entry(source, lambda: factory))

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

    def config_engines(self) -> tuple[str, ...]:
        """The engines spec configs can name (all but those measuring a foreign server)."""
        return tuple(
            n for n in self.names() if getattr(self.factory(n), "speculative_configs", True)
        )


ENGINE_TABLE = EngineTable()
