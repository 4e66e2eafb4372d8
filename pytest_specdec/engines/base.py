"""The engine Protocol and what all adapters share (OpenAI chat streaming, Prometheus text).

Lifecycle steps, named the same in every adapter:
``check_installed`` → ``build_command`` → (launcher starts it) → ``is_ready`` →
``request`` (+ ``spec_counters`` around it) → (launcher stops it).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from pytest_specdec.core.configs import SpecConfig
from pytest_specdec.core.results import RunRecord
from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.core.values import masked
from pytest_specdec.engines.lint import Finding
from pytest_specdec.measure.client import RequestFailed, StreamOutcome, get, post_json, stream_sse
from pytest_specdec.measure.levels import LoadLimits
from pytest_specdec.measure.lossless import GreedyOutput


class EngineNotInstalled(RuntimeError):
    """The engine a config needs is not installed; the message says what to install."""


@dataclass(frozen=True)
class BootContext:
    """Everything an adapter needs to build one server's command line."""

    config: SpecConfig
    model: str
    draft_model: str | None
    host: str
    port: int
    api_key: str | None = None
    # A private (0700) folder for files that carry secrets to an engine that reads them
    # (SGLang's --config YAML); None where the engine cannot see this machine's files.
    secret_dir: Path | None = None
    # The cores the engine is pinned to (engines/cpus.py); None: no pinning, its own threads.
    cpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    secrets: tuple[str, ...] = ()

    def redacted_argv(self) -> list[str]:
        return [redact(a, self.secrets) for a in self.argv]

    def redacted_env(self) -> dict[str, str]:
        """The environment as recorded: secrets, and values of secret-looking names, hidden."""
        return masked({k: redact(v, self.secrets) for k, v in self.env.items()})


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


@dataclass(frozen=True)
class RequestSpec:
    """One generation request: the prompt as chat messages and as plain text."""

    prompt_id: str
    messages: list[dict[str, str]]
    text: str
    max_tokens: int
    want_token_ids: bool = False
    model: str | None = None  # the served model name, for servers that require it
    temperature: float = 0.0  # 0: greedy
    top_p: float | None = None
    seed: int | None = None
    ignore_eos: bool = False  # decode max_tokens tokens, past the end of the answer

    def sampling(self) -> dict[str, float | int]:
        """The OpenAI-style sampling fields of this request (temperature always)."""
        out: dict[str, float | int] = {"temperature": self.temperature}
        if self.temperature > 0 and self.top_p is not None:
            out["top_p"] = self.top_p
        if self.temperature > 0 and self.seed is not None:
            out["seed"] = self.seed
        return out


@dataclass(frozen=True)
class Rendering:
    """How the prompts reach the model: ``texts`` (one per conversation, rendered with the
    model's chat template) where the harness sends text, else None; ``how`` says which, and
    is recorded with the config (``extra.prompt_rendering``)."""

    texts: list[str] | None
    how: str
    kind: str = "chat-endpoint"  # "chat-endpoint" | "chat-template" | "plain"


@runtime_checkable
class Engine(Protocol):
    name: str
    readiness_path: str

    settings: EngineSettings

    def check_installed(self) -> None: ...

    def build_command(self, ctx: BootContext) -> LaunchSpec: ...

    def version(self) -> str | None: ...

    def lint_version(self) -> str | None: ...

    def inherited_env(self, environ: Mapping[str, str]) -> dict[str, str]: ...

    def lint(self, spec: LaunchSpec) -> list[Finding]: ...

    async def greedy(self, client: httpx.AsyncClient, req: RequestSpec) -> GreedyOutput: ...

    async def is_ready(self, client: httpx.AsyncClient) -> bool: ...

    async def request(
        self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord
    ) -> None: ...

    async def spec_counters(self, client: httpx.AsyncClient) -> dict[str, float] | None: ...

    flushes: bool
    port_offsets: tuple[int, ...]

    async def flush(self, client: httpx.AsyncClient) -> None: ...

    def render(
        self, model: str, conversations: Sequence[Sequence[Mapping[str, str]]]
    ) -> Rendering: ...

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]: ...


_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition → ``{"name{labels}": value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line.strip())
        if match:
            try:
                out[match.group(1)] = float(match.group(2))
            except ValueError:
                continue
    return out


async def fetch_metrics(client: httpx.AsyncClient) -> dict[str, float] | None:
    """``GET /metrics`` parsed, or None when the server does not expose metrics."""
    try:
        resp = await get(client, "/metrics")
    except RequestFailed:
        return None
    if resp.status_code != 200:
        return None
    return parse_prometheus(resp.text)


def counter_total(metrics: Mapping[str, float], name: str) -> float | None:
    """Sum of every series called ``name``, whatever its labels (one per rank/model)."""
    values = [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None


def flag_value(argv: Sequence[str], flags: Sequence[str]) -> tuple[str, str] | None:
    """``(flag, value)`` of the last of ``flags`` on a command line (``--f V`` or ``--f=V``)."""
    found = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags and eq:
            found = (name, value)
        elif arg in flags and i + 1 < len(argv):
            found = (arg, argv[i + 1])
    return found


def flag_int(argv: Sequence[str], flags: Sequence[str]) -> tuple[int | None, str | None]:
    """The whole-number value of the last of ``flags`` and that flag; (None, None) if absent
    or not a whole number."""
    found = flag_value(argv, flags)
    if found is None or not found[1].lstrip("-").isdigit():
        return None, None
    return int(found[1]), found[0]


def counter_delta(
    before: Mapping[str, float], after: Mapping[str, float], name: str
) -> float | None:
    start, end = counter_total(before, name), counter_total(after, name)
    if start is None or end is None:
        return None
    return end - start


def accept_from_deltas(
    drafts: float | None, accepted: float | None, drafted: float | None
) -> dict[str, float | None]:
    """Accept length per verify step = 1 + accepted / drafts (bonus token included)."""
    out: dict[str, float | None] = {
        "verify_steps": drafts,
        "accepted_tokens": accepted,
        "draft_tokens": drafted,
    }
    out["accept_length"] = 1.0 + accepted / drafts if drafts and accepted is not None else None
    return out


# --- OpenAI-compatible chat completions (llama.cpp, SGLang, vLLM, external servers) ---------


def chat_payload(req: RequestSpec, model: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "messages": req.messages,
        "max_tokens": req.max_tokens,
        **req.sampling(),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        payload["model"] = model
    if req.ignore_eos:  # llama.cpp, vLLM and SGLang take it beside the OpenAI fields
        payload["ignore_eos"] = True
    return payload


def chat_has_content(event: Mapping[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            return True
    return False


def apply_chat_outcome(out: StreamOutcome, rec: RunRecord) -> dict[str, Any]:
    """Fill ``rec`` from a chat stream; returns the final ``usage``/``timings`` event."""
    parts: list[str] = []
    final: dict[str, Any] = {}
    for event in out.events:
        for choice in event.get("choices") or []:
            parts.append((choice.get("delta") or {}).get("content") or "")
            if choice.get("finish_reason"):
                rec.finish_reason = choice["finish_reason"]
        if event.get("usage"):
            final = event
    usage = final.get("usage")
    if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
        raise RequestFailed(
            "the stream carried no usage.completion_tokens (server usage is required)"
        )
    rec.text = "".join(parts)
    rec.output_tokens = int(usage["completion_tokens"])
    rec.prompt_tokens = usage.get("prompt_tokens")
    rec.wall_s = out.wall_s
    rec.ttft_s = out.ttft_s
    return final


async def stream_chat(
    client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord, model: str | None = None
) -> dict[str, Any]:
    payload = chat_payload(req, model or req.model)
    out = await stream_sse(client, "/v1/chat/completions", payload, chat_has_content)
    return apply_chat_outcome(out, rec)


def finite_or_none(value: Any) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


async def greedy_chat(client: httpx.AsyncClient, req: RequestSpec) -> GreedyOutput:
    """Greedy output as text through a non-streaming chat completion (no token ids)."""
    payload = chat_payload(req, req.model)
    payload["stream"] = False
    payload.pop("stream_options")
    body = await post_json(client, "/v1/chat/completions", payload)
    try:
        text = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise RequestFailed(
            f"chat completion without choices[0].message.content: {body!r:.200}"
        ) from exc
    return GreedyOutput(text=str(text or ""))


def apply_timings(final: Mapping[str, Any], rec: RunRecord, absent_is_zero: bool = True) -> None:
    """llama.cpp-style ``timings`` of the last chunk: drafted and accepted tokens. llama.cpp
    omits them when it drafted nothing (0); for another server absence means unknown."""
    timings = final.get("timings")
    if isinstance(timings, dict) and (absent_is_zero or "draft_n" in timings):
        rec.extra["timings"] = timings
        rec.draft_tokens = int(timings.get("draft_n", 0))
        rec.accepted_tokens = int(timings.get("draft_n_accepted", 0))


def finish_spec(
    argv: list[str],
    ctx: BootContext,
    settings: EngineSettings,
    key_env: str | None = None,
    key_in_file: bool = False,
) -> LaunchSpec:
    """Add the environment and the API key (a secret kept out of every record). With
    ``key_env`` the key travels in that environment variable, with ``key_in_file`` in a file
    the adapter wrote and named in ``argv``: a command line is readable by every local user
    (``ps``), a process environment or a 0600 file is not."""
    env = {**settings.env, **ctx.config.env}
    secrets: tuple[str, ...] = ()
    if ctx.api_key:
        secrets = (ctx.api_key,)
        if key_env:
            env[key_env] = ctx.api_key
        elif not key_in_file:
            argv = [*argv, "--api-key", ctx.api_key]
    return LaunchSpec(argv=argv, env=env, secrets=secrets)


def write_private(folder: Path, name: str, text: str) -> Path:
    """Write ``text`` to ``folder/name``, readable by this user only (created 0600)."""
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


class EngineBase:
    """What most adapters share: settings, readiness by status 200, OpenAI chat streaming,
    greedy output as text, Prometheus counters. Adapters override what differs."""

    name = "base"
    readiness_path = "/health"
    # Variables of the parent's environment that the engine reads (it inherits them all):
    # recorded with each run, since they change the engine's behaviour without a flag.
    env_prefixes: tuple[str, ...] = ("CUDA_", "NCCL_", "TORCH_", "PYTORCH_")
    # Ports the engine derives from its own (``port + offset``): each must be valid and free.
    port_offsets: tuple[int, ...] = ()

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()

    def version(self) -> str | None:
        """The engine's installed version, None when unknown: each adapter knows where to ask."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to read its version")

    def lint_version(self) -> str | None:
        """The version of what :meth:`lint` checks a command line against: the engine's own."""
        return self.version()

    def inherited_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The engine-relevant variables of ``environ``, values of secret-looking names hidden."""
        return masked({k: v for k, v in sorted(environ.items()) if k.startswith(self.env_prefixes)})

    async def is_ready(self, client: httpx.AsyncClient) -> bool:
        try:
            resp = await get(client, self.readiness_path)
        except RequestFailed:
            return False
        return resp.status_code == 200

    async def request(self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord) -> None:
        await stream_chat(client, req, rec)

    async def greedy(self, client: httpx.AsyncClient, req: RequestSpec) -> GreedyOutput:
        return await greedy_chat(client, req)

    async def spec_counters(self, client: httpx.AsyncClient) -> dict[str, float] | None:
        return await fetch_metrics(client)

    # --- under load (optional: the driver asks only adapters that have these) -------------
    slot_flags: tuple[str, ...] = ("-np", "--parallel", "--max-running-requests", "--max-num-seqs")
    running_gauge: str | None = None  # the /metrics gauges of running and waiting requests
    queued_gauge: str | None = None

    def load_limits(self, argv: Sequence[str]) -> LoadLimits:
        """How many requests the command line lets the engine run at once, and its CUDA-graph
        batch limit, where the command line says."""
        slots, flag = flag_int(argv, self.slot_flags)
        return LoadLimits(slots=slots, slots_flag=flag)

    def load_gauges(self, metrics: Mapping[str, float]) -> dict[str, float | None]:
        """Running and queued requests now, from the engine's /metrics."""
        out: dict[str, float | None] = {}
        for key, name in (("running", self.running_gauge), ("queued", self.queued_gauge)):
            out[key] = counter_total(metrics, name) if name else None
        return out

    def log_facts(self, text: str) -> dict[str, Any]:
        """What the engine's log says about the requests it just ran (empty: nothing known)."""
        return {}

    def phase_seconds(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float]:
        """GPU seconds per forward phase between two /metrics reads (empty: not exposed)."""
        return {}

    # Whether ``flush`` can reset the engine's caches (prefix/KV cache, n-gram store) between
    # requests: a config's ``flush`` needs it.
    flushes = False

    async def flush(self, client: httpx.AsyncClient) -> None:
        raise RequestFailed(f"engine {self.name} cannot reset its caches between requests")

    # Whether ``freeze_gc`` can stop the engine's processes from scanning the objects they hold
    # so far in their garbage collections (a Python engine's long pauses): the engine settings'
    # ``freeze_gc`` needs it.
    freezes_gc = False

    async def freeze_gc(self, client: httpx.AsyncClient) -> None:
        raise RequestFailed(f"engine {self.name} has no garbage collector to freeze")

    def render(self, model: str, conversations: Sequence[Sequence[Mapping[str, str]]]) -> Rendering:
        """The prompts as the text a completion endpoint is sent. An engine measured through
        its chat endpoint renders them itself, with the model's own chat template."""
        return Rendering(None, "chat endpoint: the engine applies the model's chat template")
