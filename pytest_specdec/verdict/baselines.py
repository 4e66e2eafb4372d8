"""The baseline store: one reviewed JSON file per (hardware, engine, model, config).

A file holds the baseline key and a history of server-session summaries (per prompt: runs,
mean and sd of ln tok/s, accept length; plus the suite score). Writes are atomic (temp file +
rename) and serialised by an exclusive lock, so concurrent pytest-xdist workers never lose an
update. A file that cannot be read is never overwritten.

The key's *identity* fields must match for a comparison (a mismatch is refused, naming the
fields, unless forced). The engine version is *tracked*, not part of identity: the nightly
question is precisely whether a new engine build got slower.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specdec import __version__
from pytest_specdec.core.results import atomic_write_json, utc_now
from pytest_specdec.verdict.cells import cell_problems, levels_problem
from pytest_specdec.verdict.machines import machine_of
from pytest_specdec.verdict.stats import SessionSummary

BASELINE_SCHEMA = 1
IDENTITY_FIELDS = (
    "hardware",
    "engine",
    "model",
    "draft_model",
    "config",
    "config_sha256",
    "workload_sha256",
    "max_tokens",
    "engine_args",
    "sampling",
    "protocol",
)


class BaselineError(ValueError):
    """A baseline file is unreadable, corrupt, of another schema, or of another key."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "unknown"


def hardware_identity(
    host: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """What makes two machines comparable: GPU model/driver/power/clock lock, or the CPU."""
    if gpus:
        first = gpus[0]
        return {
            "kind": "gpu",
            "name": first.get("name"),
            "count": len(gpus),
            "driver": first.get("driver_version"),
            "power_limit_w": first.get("enforced_power_limit_w") or first.get("power_limit_w"),
            "clock_lock_mhz": first.get("locked_sm_clock_mhz"),
        }
    return {
        "kind": "cpu",
        "name": host.get("cpu_model") or host.get("processor") or host.get("machine"),
        "count": host.get("cpu_count"),
    }


def hardware_slug(hw: Mapping[str, Any]) -> str:
    return _slug(f"{hw.get('kind')}-{hw.get('name')}-x{hw.get('count')}")


def _model_ref(model: Mapping[str, Any] | None) -> str | None:
    if not model:
        return None
    return str(model.get("sha256") or model.get("id"))


def key_for(results: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline key of one config record of a results document."""
    gpu = results.get("gpu") or {}
    devices = gpu.get("devices") if isinstance(gpu, dict) else None
    models = config.get("models") or {}
    hardware = hardware_identity(results.get("host") or {}, devices)
    cpus = (results.get("options") or {}).get("cpus")
    if hardware["kind"] == "cpu" and cpus:  # the engine ran on its share of the cores
        hardware["count"] = len(cpus)
    fields = (results.get("host") or {}).get("fields")
    if fields:  # a plugin's extra hardware fields (pytest_specdec_hardware)
        hardware["fields"] = dict(sorted(fields.items()))
    return {
        "hardware": hardware,
        "engine": config.get("engine"),
        "model": _model_ref(models.get("target")),
        "model_name": (models.get("target") or {}).get("id"),
        "draft_model": _model_ref(models.get("draft")),
        "config": config.get("name"),
        "config_sha256": (config.get("config") or {}).get("sha256"),
        "workload_sha256": (results.get("workload") or {}).get("sha256"),
        "max_tokens": (results.get("options") or {}).get("max_tokens"),
        "engine_args": (config.get("extra") or {}).get("engine_args"),
        "engine_version": config.get("engine_version"),
        "sampling": sampling_of(results),
        "protocol": protocol_of(results, config),
    }


def protocol_of(results: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any] | None:
    """How the requests were made and read, where not the default: every request decoded past
    its end (``--specdec-ignore-eos``), prompts sent as text rendered by the harness
    (``chat-template`` or ``plain``) instead of through a chat endpoint, runs judged on their
    decode tok/s (``--specdec-score decode``), the engine's garbage collector frozen before
    anything was measured (engine settings ``freeze_gc``). None by default, so that keys
    stored before these choices existed still match."""
    out: dict[str, Any] = {}
    options = results.get("options") or {}
    if options.get("ignore_eos"):
        out["ignore_eos"] = True
    if options.get("score") == "decode":  # sessions of decode tok/s are never mixed with e2e
        out["score"] = "decode"
    extra = config.get("extra") or {}
    rendering = extra.get("prompt_rendering") or {}
    if rendering.get("kind") in ("chat-template", "plain"):
        out["prompt_rendering"] = rendering["kind"]
    if extra.get("engine_gc"):  # the engine's collector frozen before measuring (freeze_gc)
        out["engine_gc"] = "frozen"
    return out or None


def sampling_of(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sampling settings of a run (None: greedy): a baseline is kept per setting."""
    options = results.get("options") or {}
    temperature = options.get("temperature") or 0.0
    if not temperature:
        return None
    return {"temperature": temperature, "top_p": options.get("top_p"), "seed": options.get("seed")}


def _sampling_slug(sampling: Mapping[str, Any] | None) -> str:
    if not sampling:
        return ""
    parts = [f"t{sampling['temperature']:g}"]
    if sampling.get("top_p") is not None:
        parts.append(f"p{sampling['top_p']:g}")
    if sampling.get("seed") is not None:
        parts.append(f"s{sampling['seed']}")
    return "--" + _slug("-".join(parts))


def key_mismatch(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Identity fields that differ, as 'field: stored → current' lines."""
    return [
        f"{f}: {stored.get(f)!r} → {current.get(f)!r}"
        for f in IDENTITY_FIELDS
        if stored.get(f) != current.get(f)
    ]


def baseline_path(root: Path, key: Mapping[str, Any]) -> Path:
    model = _slug(str(key.get("model_name") or key.get("model")))
    name = f"{_slug(str(key['config']))}--{model}{_sampling_slug(key.get('sampling'))}.json"
    return root / hardware_slug(key["hardware"]) / _slug(str(key["engine"])) / name


@dataclass(frozen=True)
class Baseline:
    path: Path
    key: dict[str, Any]
    sessions: list[dict[str, Any]]

    def prompt_history(self, prompt: str) -> list[SessionSummary]:
        out = []
        for session in self.sessions:
            cell = (session.get("prompts") or {}).get(prompt)
            if cell:
                out.append(
                    SessionSummary(int(cell["n"]), float(cell["mean_log"]), float(cell["sd_log"]))
                )
        return out

    def suite_history(self) -> list[SessionSummary]:
        return [
            SessionSummary(
                int(s["suite"]["n"]), float(s["suite"]["mean_log"]), float(s["suite"]["sd_log"])
            )
            for s in self.sessions
            if s.get("suite")
        ]

    def level_cells(self, clients: int) -> list[Mapping[str, Any]]:
        """The stored cells of load level ``clients``, one per session that measured it."""
        return [
            cell
            for session in self.sessions
            if (cell := (session.get("levels") or {}).get(str(clients)))
        ]

    def level_history(self, clients: int) -> list[SessionSummary]:
        cells = self.level_cells(clients)
        return [
            SessionSummary(int(c["n"]), float(c["mean_log"]), float(c["sd_log"])) for c in cells
        ]

    def level_sessions(self, clients: int) -> list[list[float]]:
        """Each stored session's round values at ``clients`` (aggregate output tok/s)."""
        return [[float(v) for v in c["runs"]] for c in self.level_cells(clients)]

    def raw_runs(self, prompt: str | None = None) -> list[float]:
        """All stored tok/s of a prompt (or per-run suite values), oldest first."""
        out: list[float] = []
        for session in self.sessions:
            cell = (session.get("prompts") or {}).get(prompt) if prompt else session.get("suite")
            out.extend(float(v) for v in (cell or {}).get("runs", []))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": BASELINE_SCHEMA,
            "tool_version": __version__,
            "key": self.key,
            "sessions": self.sessions,
        }


def _check_document(data: Any, path: Path) -> Baseline:
    if not isinstance(data, dict):
        raise BaselineError(f"baseline {path}: expected a JSON object, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != BASELINE_SCHEMA:
        newer = isinstance(schema, int) and schema > BASELINE_SCHEMA
        raise BaselineError(
            f"baseline {path}: schema {schema!r} is not {BASELINE_SCHEMA} (left untouched): "
            + ("written by a newer pytest-specdec: upgrade it" if newer
               else "an older or unknown schema: move the file aside to start a new history")
        )  # fmt: skip
    key, sessions = data.get("key"), data.get("sessions")
    if not isinstance(key, dict) or not isinstance(sessions, list):
        raise BaselineError(f"baseline {path}: 'key' must be an object and 'sessions' a list")
    for i, session in enumerate(sessions):
        prompts = session.get("prompts") if isinstance(session, dict) else None
        if not isinstance(prompts, dict):
            raise BaselineError(f"baseline {path}: sessions[{i}].prompts must be an object")
        for name, cell in prompts.items():
            if missing := cell_problems(cell):
                raise BaselineError(
                    f"baseline {path}: sessions[{i}].prompts.{name} lacks {', '.join(missing)}"
                )
        suite = session.get("suite")
        if suite is not None and (missing := cell_problems(suite)):
            raise BaselineError(
                f"baseline {path}: sessions[{i}].suite lacks {', '.join(missing)} (got "
                f"{suite!r}); restore the file from version control or remove that session"
            )
        problem = levels_problem(session.get("levels"), f"baseline {path}: sessions[{i}]")
        if problem:
            raise BaselineError(problem)
    return Baseline(path, key, sessions)


def load_baseline(path: Path) -> Baseline | None:
    """The baseline at ``path``; None if there is none; BaselineError if it is unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(f"baseline {path} cannot be read: {exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = "UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "valid JSON"
        raise BaselineError(
            f"baseline {path} is not {what} ({exc}); it was left untouched: restore it from "
            "version control or delete it to start a new history"
        ) from exc
    return _check_document(data, path)


# What a config's key shares with other configs measured the same way (everything but the
# config and its drafter).
SHARED_FIELDS = tuple(
    f for f in IDENTITY_FIELDS if f not in ("config", "config_sha256", "draft_model")
)


def neighbours(root: Path, key: Mapping[str, Any]) -> list[Baseline]:
    """The other configs' baselines stored beside ``key``'s: the same hardware, engine, engine
    settings, target model, workload, sampling and protocol, so their sessions show how far
    sessions measured this way spread; never the config itself in another file (another model
    file name). A file that cannot be read is left out here (judging its config reports it)."""
    own = baseline_path(root, key)
    out = []
    for path in sorted(own.parent.glob("*.json")):
        if path == own:
            continue
        try:
            found = load_baseline(path)
        except BaselineError:
            continue
        if found is None or any(found.key.get(f) != key.get(f) for f in SHARED_FIELDS):
            continue
        if found.key.get("config") != key.get("config"):  # not itself under another file name
            out.append(found)
    return out


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the sibling lock file of ``path`` (of a link's target)."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(f".{path.name}.lock")
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def session_entry(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    suite: SessionSummary | None,
    suite_runs: Sequence[float],
    prompt_cells: Mapping[str, Mapping[str, Any]],
    session: int = 1,
    level_cells: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    entry = {
        "added_at": utc_now(),
        "started_at": results.get("started_at"),
        "engine_version": config.get("engine_version"),
        "engine_env": (config.get("extra") or {}).get("engine_env"),
        "commit": (results.get("options") or {}).get("commit"),
        "host": (results.get("host") or {}).get("hostname"),
        "machine": machine_of(results),
        "session": session,
        "prompts": dict(prompt_cells),
        "suite": None
        if suite is None
        else {
            "n": suite.n,
            "mean_log": suite.mean_log,
            "sd_log": suite.sd_log,
            "runs": list(suite_runs),
        },
    }
    if level_cells:  # sessions without load levels keep the shape they always had
        entry["levels"] = dict(level_cells)
    entry["id"] = _session_id(entry, config.get("name"))
    return entry


def _measured(entry: Mapping[str, Any]) -> str:
    """A digest of a session entry's measured values: the runs of its prompts, suite score and
    load levels (what two sessions, even started in the same second, never share)."""
    parts = [entry.get("prompts") or {}, entry.get("levels") or {}, {"": entry.get("suite") or {}}]
    runs = [{str(k): c.get("runs") for k, c in part.items()} for part in parts]
    return hashlib.sha256(json.dumps(runs, sort_keys=True, default=str).encode()).hexdigest()


def _session_id(entry: Mapping[str, Any], config: Any, *, distinct: bool = False) -> str:
    """A session's id: its start, config and session number (what a results file read again
    gives again, so history and the dashboard find its stored sessions); ``distinct``: with its
    host and measured values too, for a session whose plain id another already holds (two jobs
    started in the same second)."""
    parts = [entry.get("started_at"), config, entry.get("session")]
    if distinct:
        parts += [entry.get("host"), _measured(entry)[:12]]
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12]


def _already_stored(sessions: list[dict[str, Any]], entry: Mapping[str, Any], config: Any) -> bool:
    """Whether ``entry`` is among ``sessions``: one of its ids with the same measured values."""
    ids = {entry.get("id"), _session_id(entry, config, distinct=True)}
    measured = _measured(entry)
    return any(s.get("id") in ids and _measured(s) == measured for s in sessions)


def append_session(
    path: Path, key: Mapping[str, Any], entry: Mapping[str, Any], *, allow_mismatch: bool = False
) -> Baseline:
    """Append one session under the lock; refuse on a key mismatch unless forced. A forced
    session records its own key and the mismatch; the file keeps the key its history has."""
    record = dict(entry)
    with locked(path):
        current = load_baseline(path)
        if current is not None:
            diff = key_mismatch(current.key, key)
            if current.key.get("config") != key.get("config"):  # never one history of two
                raise BaselineError(
                    f"baseline {path} holds config {current.key.get('config')!r}, and config "
                    f"{key.get('config')!r} has the same file name (names that differ only in "
                    "case or outside letters and digits share one): rename one of the two"
                )
            if diff and not allow_mismatch:
                raise BaselineError(
                    f"baseline {path} has another key: {'; '.join(diff)}; move the file aside "
                    "to start a history of the new key, or pass --specdec-allow-mismatch "
                    "(specdec baseline update: --allow-mismatch) to append anyway (the file "
                    "keeps its key, the session records its own)"
                )
            if _already_stored(current.sessions, entry, key.get("config")):
                return current  # the same session twice (e.g. a rerun of update): keep one
            if any(s.get("id") == entry.get("id") for s in current.sessions):
                record["id"] = _session_id(entry, key.get("config"), distinct=True)
            if diff:
                record["forced"] = {"key": dict(key), "mismatch": diff}
        sessions = [*(current.sessions if current else []), record]
        updated = Baseline(path, current.key if current else dict(key), sessions)
        try:
            atomic_write_json(path, updated.to_dict())
        except OSError as exc:
            raise BaselineError(
                f"baseline {path} was not updated ({exc}); the previous version is intact"
            ) from exc
        return updated
