"""Prompt suites: built-in workloads and user JSONL datasets, with a stable content hash.

``load_workload(spec)`` takes a built-in name, a path to a JSONL file, or a comma list of
either (``"seed,math"``), concatenated in order. Built-in names (``builtin_names()``):

- ``seed``: the default suite, five prompts (code, explanation, short arithmetic, complex
  code, creative writing);
- ``multi_turn``, ``translation``, ``summarization``, ``qa``, ``math``, ``rag``: one
  Spec-Bench-style category each; ``specbench`` is all six, ``all`` is ``seed`` + ``specbench``.

JSONL format, one JSON object per line (blank lines are skipped); the built-in data in
``pytest_specdec/prompts/<name>.jsonl`` uses the same format and loader::

    {"id": "fibonacci", "category": "code", "prompt": "Write a Python function ..."}
    {"id": "mt_followup", "category": "multi_turn", "max_tokens": 512, "messages": [
        {"role": "user", "content": "..."}, {"role": "assistant", "content": "..."},
        {"role": "user", "content": "..."}]}

- ``id`` (required): unique, only ``a-z``, ``0-9`` and ``_`` (it becomes part of pytest ids);
- ``prompt`` (one user turn) or ``messages`` (chat turns), exactly one of the two. Roles are
  ``system`` (first turn only), ``user`` and ``assistant``; the last turn is ``user``;
- ``category`` (optional, default ``"custom"``): the group a report summarises by;
- ``max_tokens`` (optional): a positive integer overriding ``--specdec-max-tokens``.

``Workload.sha256`` hashes a canonical JSON form of the prompts (ids, categories, messages,
max_tokens), so a baseline recorded with one prompt set is never compared with another.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

ID_PATTERN = re.compile(r"[a-z0-9_]+")
ROLES = ("system", "user", "assistant")
DEFAULT_CATEGORY = "custom"
FIELDS = ("id", "category", "prompt", "messages", "max_tokens")
SPECBENCH_CATEGORIES = ("multi_turn", "translation", "summarization", "qa", "math", "rag")
COMPOSITES: dict[str, tuple[str, ...]] = {
    "specbench": SPECBENCH_CATEGORIES,
    "all": ("seed", "specbench"),
}
_PACKAGE = "pytest_specdec"
_EXAMPLE = '{"id": "my_prompt", "category": "code", "prompt": "Write a ..."}'


class WorkloadError(ValueError):
    """A workload name, file or line is invalid; the message says where and how to fix it."""


def suggest_id(raw: str) -> str:
    """A pytest-id safe version of ``raw``: ASCII-folded, lower case, runs of others → ``_``."""
    folded = unicodedata.normalize("NFKD", raw).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "_", folded.lower()).strip("_") or "prompt"


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Prompt:
    """One prompt of a workload: chat turns plus an optional output-length override."""

    id: str
    category: str
    messages: tuple[Message, ...]
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not ID_PATTERN.fullmatch(self.id):
            raise WorkloadError(
                f"prompt id {self.id!r} is not pytest-id safe; fix: use "
                f"{suggest_id(self.id)!r} (only a-z, 0-9 and _)"
            )
        if not self.messages:
            raise WorkloadError(f"prompt {self.id!r} has no messages; fix: give at least one")

    def text(self) -> str:
        """Completion-style rendering for engines or models without a chat template."""
        turns = [f"{m.role.capitalize()}: {m.content}" for m in self.messages]
        return "\n".join([*turns, "Assistant:"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "messages": [m.to_dict() for m in self.messages],
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class Workload:
    """An ordered, named set of prompts and where it came from."""

    name: str
    prompts: tuple[Prompt, ...]
    source: str

    @property
    def sha256(self) -> str:
        """Hash of the canonical JSON of the prompts: stable across runs and machines."""
        rows = [p.to_dict() for p in self.prompts]
        payload = json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.prompts)

    @property
    def categories(self) -> tuple[str, ...]:
        """Distinct categories in first-seen order."""
        return tuple(dict.fromkeys(p.category for p in self.prompts))

    def select(self, ids: Sequence[str]) -> Workload:
        """The prompts named by ``ids`` (a list, or a comma-separated string), in suite order."""
        parts = [ids] if isinstance(ids, str) else list(ids)
        wanted = [i.strip() for part in parts for i in part.split(",") if i.strip()]
        valid = ", ".join(self.ids)
        if not wanted:
            raise WorkloadError(f"no prompt ids given for {self.name!r}; valid ids: {valid}")
        unknown = [i for i in wanted if i not in self.ids]
        if unknown:
            raise WorkloadError(
                f"unknown prompt id(s) {', '.join(map(repr, unknown))} in workload {self.name!r} "
                f"({self.source}); fix: use one of the valid ids: {valid}"
            )
        keep = set(wanted)
        return Workload(self.name, tuple(p for p in self.prompts if p.id in keep), self.source)


def builtin_names() -> list[str]:
    """Names accepted by ``load_workload`` without a file path."""
    return sorted([*_builtin_files(), *COMPOSITES])


def load_workload(spec: str) -> Workload:
    """Load a built-in workload, a JSONL file, or a comma list of either (concatenated)."""
    spec = spec.strip()
    if not spec:
        raise WorkloadError(
            f"empty workload name; fix: use one of {', '.join(builtin_names())} "
            "or the path to a .jsonl file"
        )
    if "," in spec and not Path(spec).expanduser().is_file():
        names = [part.strip() for part in spec.split(",")]
        if not all(names):
            raise WorkloadError(f"workload list {spec!r} has an empty item; fix: drop the comma")
        return _concat(",".join(names), [load_workload(n) for n in names], None)
    if spec in COMPOSITES:
        return _concat(spec, [load_workload(n) for n in COMPOSITES[spec]], f"builtin:{spec}")
    if spec in _builtin_files():
        resource = resources.files(_PACKAGE) / "prompts" / f"{spec}.jsonl"
        where = f"builtin:{spec} ({_PACKAGE}/prompts/{spec}.jsonl)"
        return parse_jsonl(resource.read_text(encoding="utf-8"), spec, f"builtin:{spec}", where)
    return _load_file(spec)


def parse_jsonl(text: str, name: str, source: str, where: str | None = None) -> Workload:
    """Parse JSONL text into a workload; errors name ``where`` (default ``source``) and line."""
    where = where or source
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        prompt = _Line(where, lineno).parse(raw)
        if prompt.id in first_line:
            raise WorkloadError(
                f"{where}:{lineno}: duplicate id {prompt.id!r} (first used on line "
                f"{first_line[prompt.id]}); fix: give every prompt a unique id"
            )
        first_line[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise WorkloadError(
            f"{where}: no prompts (the file is empty); fix: add one JSON object "
            f"per line, e.g. {_EXAMPLE}"
        )
    return Workload(name, tuple(prompts), source)


def _builtin_files() -> list[str]:
    folder = resources.files(_PACKAGE) / "prompts"
    return sorted(p.name[: -len(".jsonl")] for p in folder.iterdir() if p.name.endswith(".jsonl"))


def _load_file(spec: str) -> Workload:
    path = Path(spec).expanduser()
    if not path.is_file():
        close = difflib.get_close_matches(spec, builtin_names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise WorkloadError(
            f"workload {spec!r} is not a built-in name and the file {path.resolve()} {what}; "
            f"fix: {hint}use one of {', '.join(builtin_names())} or the path to a .jsonl file"
        )
    resolved = path.resolve()
    try:
        text = resolved.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(
            f"{resolved}: cannot read workload file ({exc}); fix: save it as "
            "UTF-8 text with one JSON object per line"
        ) from exc
    return parse_jsonl(text, resolved.stem, str(resolved))


def _concat(name: str, parts: list[Workload], source: str | None) -> Workload:
    origin: dict[str, str] = {}
    for part in parts:
        for pid in part.ids:
            if pid in origin:
                raise WorkloadError(
                    f"workload {name!r}: prompt id {pid!r} appears in both {origin[pid]} and "
                    f"{part.source}; fix: list each workload once, or rename the id in one file"
                )
            origin[pid] = part.source
    prompts = tuple(p for part in parts for p in part.prompts)
    return Workload(name, prompts, source or ",".join(p.source for p in parts))


class _Line:
    """Validation of one JSONL line; every error names the file, line, field and fix."""

    def __init__(self, where: str, lineno: int) -> None:
        self.where, self.lineno = where, lineno

    def fail(self, problem: str, fix: str) -> NoReturn:
        raise WorkloadError(f"{self.where}:{self.lineno}: {problem}; fix: {fix}")

    def parse(self, raw: str) -> Prompt:
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            self.fail(
                f"invalid JSON ({exc.msg} at column {exc.colno})",
                f"write one complete JSON object per line, e.g. {_EXAMPLE}",
            )
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object, got {type(obj).__name__}", f"write e.g. {_EXAMPLE}")
        for key in obj:
            if key not in FIELDS:
                close = difflib.get_close_matches(key, FIELDS, n=1)
                fix = f"rename it to {close[0]!r}" if close else f"use only {', '.join(FIELDS)}"
                self.fail(f"unknown field {key!r}", fix)
        pid = self.text(obj, "id")
        if not ID_PATTERN.fullmatch(pid):
            bad = f"field 'id' value {pid!r} may only contain a-z, 0-9 and _ (pytest ids)"
            self.fail(bad, f'use "id": "{suggest_id(pid)}"')
        category = self.text(obj, "category") if "category" in obj else DEFAULT_CATEGORY
        return Prompt(pid, category, self.messages(obj), self.max_tokens(obj))

    def text(self, obj: dict[str, Any], key: str, label: str | None = None) -> str:
        label = label or key
        if key not in obj:
            self.fail(f"missing field {label!r}", f'add "{key}": "..."')
        value = obj[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(
                f"field {label!r} value {value!r:.60} is not a non-empty string",
                f'give "{key}" a non-empty text value',
            )
        return value

    def messages(self, obj: dict[str, Any]) -> tuple[Message, ...]:
        if ("prompt" in obj) == ("messages" in obj):
            self.fail(
                "a prompt needs exactly one of the fields 'prompt' and 'messages'",
                'give "prompt": "..." for one user turn, or "messages": [...] for chat turns',
            )
        if "prompt" in obj:
            return (Message("user", self.text(obj, "prompt")),)
        turns = obj["messages"]
        if not isinstance(turns, list) or not turns:
            self.fail(
                f"field 'messages' value {turns!r:.60} is not a non-empty list",
                'use "messages": [{"role": "user", "content": "..."}]',
            )
        out = tuple(self.turn(turn, i) for i, turn in enumerate(turns))
        if out[-1].role != "user":
            last = f"the last of 'messages' has role {out[-1].role!r}"
            self.fail(last, "end 'messages' with a user turn for the model to answer")
        return out

    def turn(self, turn: object, index: int) -> Message:
        label = f"messages[{index}]"
        if not isinstance(turn, dict) or set(turn) != {"role", "content"}:
            self.fail(
                f"field {label!r} value {turn!r:.60} is not a role/content object",
                'write each turn as {"role": "user", "content": "..."}',
            )
        role = turn["role"]
        if role not in ROLES:
            bad = f"field '{label}.role' value {role!r} is not a chat role"
            self.fail(bad, f"use one of {', '.join(ROLES)}")
        if role == "system" and index != 0:
            self.fail(
                f"field '{label}.role' is 'system' but not the first turn",
                "move the system message to the start of 'messages'",
            )
        return Message(role, self.text(turn, "content", f"{label}.content"))

    def max_tokens(self, obj: dict[str, Any]) -> int | None:
        value = obj.get("max_tokens")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            self.fail(
                f"field 'max_tokens' value {value!r} is not a positive integer",
                "use a whole number such as 512, or null for --specdec-max-tokens",
            )
        return value
