"""vLLM: ``vllm serve MODEL --speculative-config '<json>'``; ``/health``; Prometheus counters.

Accept length per verify step = 1 + Δaccepted / Δdrafts (``vllm:spec_decode_num_*_total``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import httpx

from pytest_specdec.client import RequestFailed, get
from pytest_specdec.engines.base import (
    BootContext,
    EngineNotInstalled,
    LaunchSpec,
    RequestSpec,
    accept_from_deltas,
    counter_delta,
    fetch_metrics,
    greedy_chat,
    stream_chat,
)
from pytest_specdec.lint import Finding, lint_by_help
from pytest_specdec.lossless import GreedyOutput
from pytest_specdec.results import RunRecord
from pytest_specdec.suitefile import EngineSettings

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


def _binary(settings: EngineSettings) -> str | None:
    return shutil.which(os.path.expanduser(settings.binary or "vllm"))


def speculative_config_json(spec: Mapping[str, Any], draft_model: str | None) -> str:
    data = dict(spec)
    if draft_model:
        data["model"] = draft_model
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


class VLLMEngine:
    name = "vllm"
    readiness_path = "/health"

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()

    def check_installed(self) -> None:
        settings = self.settings
        if _binary(settings) is None:
            raise EngineNotInstalled(
                f"the vllm command ({settings.binary or 'vllm'}) is not on PATH: pip install vllm, "
                'or set [engines.vllm] binary = "/path/to/vllm"'
            )

    def build_command(self, ctx: BootContext) -> LaunchSpec:
        binary = _binary(self.settings) or (self.settings.binary or "vllm")
        argv = [binary, "serve", ctx.model, "--host", ctx.host, "--port", str(ctx.port)]
        argv += [*self.settings.extra_args, *ctx.config.args]
        if ctx.config.speculative_config:
            argv += [
                "--speculative-config",
                speculative_config_json(ctx.config.speculative_config, ctx.draft_model),
            ]
        secrets: tuple[str, ...] = ()
        if ctx.api_key:
            argv += ["--api-key", ctx.api_key]
            secrets = (ctx.api_key,)
        return LaunchSpec(argv=argv, env={**self.settings.env, **ctx.config.env}, secrets=secrets)

    def version(self) -> str | None:
        settings = self.settings
        binary = _binary(settings)
        if binary is None:
            return None
        try:
            proc = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = proc.stdout.strip().splitlines()
        return f"vllm {lines[-1]}" if proc.returncode == 0 and lines else None

    def lint(self, spec: LaunchSpec) -> list[Finding]:
        """Flags of the command line that ``vllm serve --help=all`` does not list."""
        return lint_by_help(spec.argv[3:], [spec.argv[0], "serve", "--help=all"])

    async def is_ready(self, client: httpx.AsyncClient) -> bool:
        try:
            resp = await get(client, self.readiness_path)
        except RequestFailed:
            return False
        return resp.status_code == 200

    async def request(self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord) -> None:
        await stream_chat(client, req, rec, model=req.model)

    async def greedy(self, client: httpx.AsyncClient, req: RequestSpec) -> GreedyOutput:
        return await greedy_chat(client, req)

    async def spec_counters(self, client: httpx.AsyncClient) -> dict[str, float] | None:
        return await fetch_metrics(client)

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]:
        return accept_from_deltas(
            counter_delta(before, after, DRAFTS),
            counter_delta(before, after, ACCEPTED),
            counter_delta(before, after, DRAFT_TOKENS),
        )
