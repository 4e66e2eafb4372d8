"""The concurrency sweep step: ``clients`` concurrent clients over the workload against one
server, summarized per level (see measure/levels.py) and kept on the config's record. A step
of :class:`Steps`, as the runner is made of them."""

from __future__ import annotations

from pytest_specdec.core.results import RunRecord, finalize_timings
from pytest_specdec.driver.boot import Server
from pytest_specdec.driver.steps import Steps
from pytest_specdec.measure.levels import LevelResult, parallel_slots, run_level, summarize_level


class SweepSteps(Steps):
    """:class:`Steps` with the concurrency sweep."""

    def sweep(self, server: Server, clients: int) -> LevelResult:
        """``clients`` concurrent clients over the workload: aggregate tok/s, percentiles."""
        if self.settings.warmup and not server.warmed:
            self.warmup(server)
        prompts = self.workload.prompts
        total = max(2 * clients, len(prompts))

        async def send(index: int) -> RunRecord:
            prompt = prompts[index % len(prompts)]
            rec = RunRecord(
                config=server.config.name, prompt=prompt.id, run=index, phase="concurrency",
                session=server.session, extra={"clients": clients},
            )  # fmt: skip
            await self.send(
                server, self.request_spec(prompt, server.model_name, texts=server.texts), rec
            )
            return finalize_timings(rec)

        async def level() -> tuple[list[RunRecord], float, float | None]:
            before = await server.engine.spec_counters(server.client)
            records, wall = await run_level(clients, total, send)
            after = await server.engine.spec_counters(server.client)
            accept = None
            if before is not None and after is not None:
                accept = server.engine.accept_from_counters(before, after).get("accept_length")
            return records, wall, accept

        records, wall, accept = self.loop.run(level())
        result = summarize_level(clients, records, wall, accept)
        server.record.runs.extend(records)
        entry = {**result.to_dict(), "parallel_slots": parallel_slots(server.record.command)}
        server.record.extra.setdefault("concurrency", []).append(entry)
        self.write_results()
        return result
