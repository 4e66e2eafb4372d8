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

from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.base import (
    BootContext,
    EngineBase,
    EngineNotInstalled,
    LaunchSpec,
    accept_from_deltas,
    counter_delta,
    finish_spec,
)
from pytest_specdec.engines.lint import Finding, lint_by_help

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


class VLLMEngine(EngineBase):
    name = "vllm"
    readiness_path = "/health"
    env_prefixes = (*EngineBase.env_prefixes, "VLLM_")
    slot_flags = ("--max-num-seqs",)
    running_gauge = "vllm:num_requests_running"
    queued_gauge = "vllm:num_requests_waiting"

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
        return finish_spec(argv, ctx, self.settings, key_env="VLLM_API_KEY")

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

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]:
        return accept_from_deltas(
            counter_delta(before, after, DRAFTS),
            counter_delta(before, after, ACCEPTED),
            counter_delta(before, after, DRAFT_TOKENS),
        )
