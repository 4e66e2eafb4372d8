"""Any OpenAI-compatible server measured through ``--specdec-server-url`` (never booted).

Readiness is ``GET /v1/models``: for a server someone else started and warmed up, answering is
the best signal there is. Speculative stats are read from ``/metrics`` with the counter names
of llama.cpp, vLLM or SGLang, whichever the server exposes.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from pytest_specdec.core.engine_table import ENGINE_TABLE
from pytest_specdec.core.results import RunRecord
from pytest_specdec.engines.base import (
    BootContext,
    Engine,
    EngineBase,
    EngineNotInstalled,
    LaunchSpec,
    RequestSpec,
    apply_timings,
    stream_chat,
)
from pytest_specdec.engines.lint import Finding


class OpenAIEngine(EngineBase):
    name = "openai"
    readiness_path = "/v1/models"
    speculative_configs = False  # measures a server someone else started

    def check_installed(self) -> None:
        return None

    def build_command(self, ctx: BootContext) -> LaunchSpec:
        raise EngineNotInstalled(
            "the openai engine only measures a running server: pass --specdec-server-url URL"
        )

    def version(self) -> str | None:
        return None

    def lint(self, spec: LaunchSpec) -> list[Finding]:
        return []

    async def request(self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord) -> None:
        apply_timings(await stream_chat(client, req, rec), rec, absent_is_zero=False)

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]:
        # whichever family's counters are there (an adapter that does not import has none)
        for name in ENGINE_TABLE.config_engines(loaded_only=True):
            family: Engine = ENGINE_TABLE.factory(name)()
            found = family.accept_from_counters(before, after)
            if found.get("accept_length") is not None:
                return found
        return {
            "accept_length": None,
            "verify_steps": None,
            "accepted_tokens": None,
            "draft_tokens": None,
        }
