"""The lossless reference: each target booted once without speculation, its greedy outputs
kept, and every config's greedy output compared with them (the policy: measure/lossless.py).
Steps of :class:`Steps`, as the runner is made of them.

The outputs are also stored in the cache (``<cache>/lossless/``) under the sha256 of what they
depend on: the engine and its version, the target's sha256, the engine's arguments and
environment from the suite file, the hardware (GPU model, driver, power limit, clock lock; or
the CPU) and every greedy request. A later run with the same key compares with them instead of
booting the target again (a whole boot per run: 60-140 s for SGLang on an H200);
``SPECDEC_REFERENCE_CACHE=0`` boots it every time. A hub id (contents unknown) is never stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pytest_specdec.core.configs import SpecConfig
from pytest_specdec.core.modelfile import cache_root, model_identity
from pytest_specdec.core.results import ConfigRecord, atomic_write_json, host_fingerprint
from pytest_specdec.core.values import masked
from pytest_specdec.core.workloads import Prompt
from pytest_specdec.driver.boot import Server
from pytest_specdec.driver.steps import Steps
from pytest_specdec.engines import Engine
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.measure.lossless import GreedyOutput, LosslessResult, compare
from pytest_specdec.verdict.baselines import hardware_identity


class ReferenceSteps(Steps):
    """:class:`Steps` with the lossless reference: made once, compared with every config."""

    def _reference_key(self, cfg: SpecConfig) -> tuple[str, str]:
        return cfg.engine, self.planner.models_for(cfg)[0]

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
            engine = self.planner.engine_for(ref)
            stored_key = self.stored_key(engine, key[1])
            stored = self.stored_reference(stored_key)
            if stored is not None:
                path, outputs = stored
                self.references[key] = outputs
                self.notes.append(
                    f"lossless reference of {key[1]} on {engine.name}: the stored outputs of an "
                    f"earlier boot with the same engine, target, arguments, hardware and "
                    f"requests ({path}); SPECDEC_REFERENCE_CACHE=0 boots it again"
                )
                continue
            record = ConfigRecord(ref.name, ref.engine, ref.to_dict())
            self.reference_records.append(record)
            started = time.perf_counter()
            server = self.booter.launch(self.planner.plan(ref), record, started)
            try:
                outputs = {}
                for prompt in self.workload.prompts:
                    req = self.greedy_spec(prompt, server.model_name)
                    outputs[prompt.id] = self.loop.run(engine.greedy(server.client, req))
                record.extra["outputs"] = {k: asdict(v) for k, v in outputs.items()}
                self.references[key] = outputs
                self.store_reference(stored_key, record, outputs)
            finally:
                self.stop(server)

    def stored_key(self, engine: Engine, target: str) -> dict[str, Any] | None:
        """What the target's greedy outputs depend on, the key they are stored under; None
        where one part is unknown (or storing is off)."""
        if os.environ.get("SPECDEC_REFERENCE_CACHE", "1") == "0":
            return None
        sha = model_identity(target).get("sha256")
        version = engine.version()
        if not sha or not version:
            return None
        devices = (self.gpu or {}).get("devices") if isinstance(self.gpu, dict) else None
        return {
            "engine": engine.name,
            "engine_version": version,
            "target_sha256": sha,
            "engine_args": list(engine.settings.extra_args),
            "engine_env": masked(dict(sorted(engine.settings.env.items()))),  # no token kept
            "hardware": hardware_identity(host_fingerprint(), devices),
            "requests": [asdict(self.greedy_spec(p)) for p in self.workload.prompts],
        }

    def _reference_path(self, key: dict[str, Any]) -> Path:
        blob = json.dumps(key, sort_keys=True, separators=(",", ":")).encode()
        return cache_root() / "lossless" / f"{hashlib.sha256(blob).hexdigest()}.json"

    def stored_reference(
        self, key: dict[str, Any] | None
    ) -> tuple[Path, dict[str, GreedyOutput]] | None:
        """The outputs an earlier boot stored under ``key``, or None (no key, a missing,
        damaged or other-key file included)."""
        if key is None:
            return None
        path = self._reference_path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data["key"] != key:
                return None
            outputs = {p: GreedyOutput(**o) for p, o in data["outputs"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if set(outputs) != {p.id for p in self.workload.prompts}:
            return None
        return path, outputs

    def store_reference(
        self, key: dict[str, Any] | None, record: ConfigRecord, outputs: dict[str, GreedyOutput]
    ) -> None:
        """Keep a reference boot's outputs under ``key`` for later runs (a failed request
        raised before)."""
        if key is None:
            return
        data = {"key": key, "outputs": {p: asdict(o) for p, o in outputs.items()},
                "log_path": record.log_path}  # fmt: skip
        with contextlib.suppress(OSError):  # a cache that cannot be written costs a boot
            atomic_write_json(self._reference_path(key), data)

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
