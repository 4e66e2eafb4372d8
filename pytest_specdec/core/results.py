"""Run records and the results JSON file (every raw run, environment, engine, models).

Timings are monotonic (``perf_counter_ns``) differences; ``started_at`` is wall-clock and for
display only. A failed run carries ``error`` and no throughput: an error is never a number.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS_SCHEMA = 1


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class RunRecord:
    """One request of one prompt under one config."""

    config: str
    prompt: str
    run: int
    phase: str = "measure"  # "warmup" | "measure"
    error: str | None = None
    output_tokens: int | None = None
    max_tokens: int | None = None  # the output tokens the request asked for, at most
    prompt_tokens: int | None = None
    wall_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tok_per_s: float | None = None
    accept_length: float | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    verify_steps: int | None = None
    accept_source: str | None = None  # where accept_length came from
    text: str | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    session: int = 1
    started_at: str = field(default_factory=utc_now)
    gpu: dict[str, Any] | None = None
    invalid: list[str] | None = None  # GPU hygiene reasons: kept, never averaged in
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def finalize_timings(rec: RunRecord) -> RunRecord:
    """Derive tok/s and TPOT from tokens, wall time and TTFT (None where undefined)."""
    if rec.error is not None or rec.output_tokens is None or rec.wall_s is None:
        return rec
    if rec.output_tokens <= 0:
        rec.error = "server reported 0 output tokens"
        return rec
    if rec.wall_s > 0:
        rec.tok_per_s = rec.output_tokens / rec.wall_s
    if rec.ttft_s is not None and rec.output_tokens > 1:
        rec.tpot_s = (rec.wall_s - rec.ttft_s) / (rec.output_tokens - 1)
    return rec


def rates_from_histogram(histogram: Any, positions: int | None = None) -> list[float] | None:
    """Acceptance rate per draft position from a histogram of correct drafts per verify step
    (``histogram[j]`` steps accepted exactly j drafted tokens, SGLang's
    ``spec_correct_drafts_histogram``): position k is accepted in the steps with at least k
    correct drafts, the rate llama.cpp reports per position (accepted / drafted). The engine
    may end the histogram at the longest run it saw; ``positions`` (drafts per step) pads it."""
    if not isinstance(histogram, list) or len(histogram) < 2:
        return None
    counts = [c if isinstance(c, (int, float)) and c >= 0 else None for c in histogram]
    steps = sum(c for c in counts if c is not None)
    if None in counts or steps <= 0:
        return None
    rates = [sum(counts[k:]) / steps for k in range(1, len(counts))]  # type: ignore[arg-type]
    return rates + [0.0] * max(0, (positions or 0) - len(rates))


def meta_info_rates(meta: Mapping[str, Any]) -> list[float] | None:
    """Acceptance per draft position from SGLang's ``meta_info``, as wide as the drafts it
    proposed per verify step."""
    proposed, steps = meta.get("spec_num_proposed_drafts"), meta.get("spec_verify_ct")
    width = None
    if isinstance(proposed, int) and isinstance(steps, int) and steps > 0 and proposed % steps == 0:
        width = proposed // steps
    return rates_from_histogram(meta.get("spec_correct_drafts_histogram"), width)


def position_rates_of(run: Mapping[str, Any]) -> list[float] | None:
    """A run record's acceptance rate per draft position: as the engine reported it, else from
    its histogram of correct drafts per verify step."""
    extra = run.get("extra") or {}
    rates = extra.get("accept_rate_per_position")
    if rates:
        return [float(r) for r in rates]
    return meta_info_rates(extra.get("meta_info") or {})


@dataclass
class ConfigRecord:
    """One config's server session: what was booted and everything measured on it."""

    name: str
    engine: str
    config: dict[str, Any]
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    engine_version: str | None = None
    models: dict[str, Any] = field(default_factory=dict)
    server_url: str | None = None
    log_path: str | None = None
    boot_s: float | None = None
    warmup_s: float | None = None
    error: str | None = None
    runs: list[RunRecord] = field(default_factory=list)
    gpu: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def measured(self, prompt: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if r.phase == "measure" and prompt in (None, r.prompt)]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["runs"] = [r.to_dict() for r in self.runs]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigRecord:
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known and k != "runs"}
        return cls(**fields, runs=[RunRecord.from_dict(r) for r in data.get("runs", [])])


def cpu_model() -> str | None:
    """The CPU model name from /proc/cpuinfo (Linux), else None."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def host_fingerprint() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def _clean(value: Any) -> Any:
    """Replace non-finite floats by None so the JSON is strict."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _umask() -> int:
    """The process's umask, read from /proc where it is (setting it to read it back would
    change it for a moment under the plugin's other threads)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def replaced_mode(path: Path) -> int:
    """The permissions a file written in place of ``path`` gets: those of the file it replaces,
    else what ``open()`` would give a new one (0666 less the umask). A temp file from mkstemp
    is private (0600), and renamed over a baseline or a report it would lock others out."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def atomic_replace(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """Write ``path`` whole or not at all: ``write`` fills a temp file in the same folder,
    which is flushed to disk, gets the permissions of the file it replaces (or a new file's)
    and is renamed over ``path``; if anything fails the temp file is removed and ``path`` is
    left as it was. A symbolic link stays one: the file it points to is the one replaced."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = replaced_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (``atomic_replace``), with the permissions of the file it
    replaces (or a new file's); gzipped where the name ends in ``.gz``, as ``load_results``
    reads it."""
    clean = _clean(data)

    def write(tmp: Path) -> None:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(tmp, "wt", encoding="utf-8") as fh:
            json.dump(clean, fh, indent=2, sort_keys=True, allow_nan=False)
            fh.write("\n")

    atomic_replace(path, write)


def write_results_file(path: Path, doc: Mapping[str, Any]) -> None:
    """Write a run's results document (``atomic_write_json``), the first write of the run
    keeping another run's measurements found there (``keep_previous``)."""
    keep_previous(path, doc)
    atomic_write_json(path, doc)


def previous_path(path: Path) -> Path:
    """Where ``keep_previous`` keeps an earlier run's results: ``<stem>.prev.json`` (.json.gz)."""
    ext = ".json.gz" if path.name.endswith(".json.gz") else path.suffix
    return path.with_name(f"{path.name.removesuffix(ext)}.prev{ext}")


_KEPT: set[tuple[Path, str]] = set()  # (results file, started_at) whose first write is done


def keep_previous(path: Path, doc: Mapping[str, Any]) -> None:
    """Before a run's first write of its results document: a file there of another run
    (another ``started_at``) that holds measurements is copied to ``previous_path`` (atomically,
    replacing an older copy): a run that fails early (its server never came up) keeps them."""
    target, started = path.resolve(), str(doc.get("started_at"))
    if "started_at" not in doc or (target, started) in _KEPT:
        return
    try:
        old = load_results(target)
    except ResultsError:  # none there, or not results: nothing to keep
        old = None
    if old is not None and str(old.get("started_at")) != started and _measured(old):
        atomic_replace(previous_path(target), lambda tmp: shutil.copy2(target, tmp))
    _KEPT.add((target, started))


def _measured(doc: Mapping[str, Any]) -> bool:
    """Whether a results document holds a run measured without an error, or a load round."""
    runs = [r for c in doc["configs"] for r in c["runs"]]
    rounds = [e for c in doc["configs"] for e in (c.get("extra") or {}).get("load") or []]
    return any(r.get("ok") and r.get("phase", "measure") == "measure" for r in runs) or any(
        not e.get("warmup") for e in rounds
    )


def results_document(
    configs: Iterable[ConfigRecord],
    *,
    started_at: str,
    options: Mapping[str, Any],
    workload: Mapping[str, Any],
    gpu: Any,
    tool_version: str,
    extra: Mapping[str, Any] | None = None,
    host_fields: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The results document. ``host_fields``: extra hardware fields from plugins, kept
    under ``host.fields`` (and so in every baseline key's ``hardware``)."""
    host = host_fingerprint()
    if host_fields:
        host["fields"] = dict(host_fields)
    return {
        "schema": RESULTS_SCHEMA,
        "tool": {"name": "pytest-specdec", "version": tool_version},
        "started_at": started_at,
        "finished_at": utc_now(),
        "host": host,
        "gpu": gpu,
        "options": dict(options),
        "workload": dict(workload),
        "configs": [c.to_dict() for c in configs],
        **dict(extra or {}),
    }


class ResultsError(ValueError):
    """A results file is missing, corrupt or of another schema; the message names the file."""


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} where a number belongs (results files are written without it)")


def load_results(path: Path) -> dict[str, Any]:
    """A results file (``.json``, or ``.json.gz`` as results are kept for long); NaN and
    Infinity, which strict JSON has not and the plugin never writes, are refused."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                data = json.load(fh, parse_constant=_not_a_number)
        else:
            data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_not_a_number)
    except FileNotFoundError:
        raise ResultsError(f"results file {path} does not exist") from None
    except (OSError, EOFError, ValueError) as exc:  # JSON, UTF-8 and NaN errors among them
        raise ResultsError(f"results file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ResultsError(
            f"results file {path} has schema {found!r}; this version reads schema {RESULTS_SCHEMA}"
        )
    problem = _shape_problem(data)
    if problem is not None:
        raise ResultsError(
            f"results file {path}: {problem}; is it a results file pytest-specdec wrote "
            "(--specdec-results)? Give that file, or write it again with a pytest-specdec run"
        )
    return data


def _shape_problem(data: Mapping[str, Any]) -> str | None:
    """What keeps a schema-1 document from being read as results (None: nothing): ``configs``
    a list of objects with a string ``name`` and a list of ``runs`` each, ``workload`` an
    object."""
    configs = data.get("configs")
    if not isinstance(configs, list):
        return "'configs' must be a list"
    if not isinstance(data.get("workload"), dict):
        return f"'workload' must be an object, found {data.get('workload')!r:.60}"
    for i, cfg in enumerate(configs):
        if not isinstance(cfg, dict):
            return f"configs[{i}] must be an object, found {cfg!r:.60}"
        if not isinstance(cfg.get("name"), str):
            return f"configs[{i}] has no string 'name' (found {cfg.get('name')!r})"
        runs = cfg.get("runs")
        if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            return f"configs[{i}] ({cfg['name']}): 'runs' must be a list of objects"
    return None
