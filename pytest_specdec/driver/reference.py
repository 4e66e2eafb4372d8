"""The lossless reference: each target booted once without speculation, its greedy outputs
kept, and every config's greedy output compared with them (the policy: measure/lossless.py).
Steps of :class:`Steps`, as the runner is made of them."""

from __future__ import annotations

from dataclasses import asdict, replace

from pytest_specdec.core.configs import SpecConfig
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.workloads import Prompt
from pytest_specdec.driver.boot import Server
from pytest_specdec.driver.steps import Steps
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.measure.lossless import LosslessResult, compare


class ReferenceSteps(Steps):
    """:class:`Steps` with the lossless reference: made once, compared with every config."""

    def _reference_key(self, cfg: SpecConfig) -> tuple[str, str]:
        return cfg.engine, self.booter.models_for(cfg)[0]

    def ensure_references(self) -> None:
        """Boot each target once without speculation and keep its greedy output per prompt.

        Done before the first config boots, so two servers never share the accelerator. Not done
        when the run samples (temperature above 0): exact equality does not apply there."""
        if self.settings.temperature > 0:
            return
        for cfg in self.configs:
            if self.settings.server_url:
                return
            key = self._reference_key(cfg)
            if key in self.references:
                continue
            ref = SpecConfig(
                name=f"reference-{cfg.engine}", engine=cfg.engine, model=key[1],
                description="the target without speculation: the lossless reference",
                source="lossless reference",
            )  # fmt: skip
            record = ConfigRecord(ref.name, ref.engine, ref.to_dict())
            self.reference_records.append(record)
            engine = self.booter.engine_for(ref)
            server = self.booter.launch(ref, engine, record)
            try:
                outputs = {}
                for prompt in self.workload.prompts:
                    req = self.greedy_spec(prompt, server.model_name)
                    outputs[prompt.id] = self.loop.run(engine.greedy(server.client, req))
                record.extra["outputs"] = {k: asdict(v) for k, v in outputs.items()}
                self.references[key] = outputs
            finally:
                self.stop(server)

    def lossless(self, server: Server, prompt: Prompt) -> LosslessResult:
        """Greedy output of ``server`` against the reference, first divergence located."""
        key = self._reference_key(server.config)
        if key not in self.references:
            raise LaunchError(
                "no lossless reference: it is made by booting the target without speculation "
                "before the first config (not possible with --specdec-server-url)"
            )
        req = self.greedy_spec(prompt, server.model_name)
        output = self.loop.run(server.engine.greedy(server.client, req))
        result = compare(
            server.config.name, prompt.id, self.references[key][prompt.id], output,
            self.settings.lossless_fail_before,
        )  # fmt: skip
        detok = getattr(server.engine, "detokenize", None)
        if result.position is not None and result.unit == "token" and detok is not None:
            ref_ids = self.references[key][prompt.id].token_ids or []
            window = slice(max(0, result.position - 5), result.position + 5)
            result = replace(
                result,
                reference_text=self.loop.run(detok(server.client, ref_ids[window])),
                output_text=self.loop.run(detok(server.client, (output.token_ids or [])[window])),
            )
        entry = result.to_dict()
        entry["full_output"] = output.text
        server.record.extra.setdefault("lossless", {})[prompt.id] = entry
        self.write_results()
        return result
