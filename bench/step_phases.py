"""Where a speculative config's verify step goes, one request at a time: per verify step, the
wall time, the tokens it emitted, and the GPU seconds of each forward phase that SGLang's
device timer counted (``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``); the rest of the step is what
the timer did not see: the draft's forward where the engine times it under no phase, and the
host's part (scheduling, reads back to the host, launches).

    python bench/step_phases.py RESULTS.json[.gz] [OTHER.json[.gz] ...] [--config dflash-b16]

Each file's config is read from its measured one-request runs (per prompt, then over all), or,
where it has none, from the rounds of its load level of one client (``--clients``), which send
one request at a time too. Two files of one config (an engine build against another, with the
same drafter and prompts) print side by side with the ratio of their per-step figures; equal
verify-step counts mean that both accepted the same tokens, so any difference in speed is the
step's cost.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import load_results
from pytest_specdec.measure.levels import rounds_of


@dataclass(frozen=True)
class StepCost:
    """Totals over some requests of one config: their wall time, output tokens, verify steps
    and each timed phase's GPU seconds; per-step figures derived."""

    source: str  # "runs" (one-request runs) or "N clients" (a load level's rounds)
    requests: int
    wall_s: float
    tokens: int
    steps: int
    phase_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def wall_per_step_ms(self) -> float:
        return 1e3 * self.wall_s / self.steps

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps

    @property
    def untimed_per_step_ms(self) -> float:
        """The part of a step that no phase of the device timer counted."""
        return self.wall_per_step_ms - sum(self.phase_per_step_ms().values())

    def phase_per_step_ms(self) -> dict[str, float]:
        return {k: 1e3 * v / self.steps for k, v in sorted(self.phase_s.items())}


Part = tuple[int, float, int, int, Mapping[str, float]]  # requests, wall, tokens, steps, phases


def _total(source: str, parts: Iterable[Part]) -> StepCost:
    requests, wall, tokens, steps, phases = 0, 0.0, 0, 0, dict[str, float]()
    for part_requests, part_wall, part_tokens, part_steps, part_phases in parts:
        requests += part_requests
        wall, tokens, steps = wall + part_wall, tokens + part_tokens, steps + part_steps
        for name, seconds in part_phases.items():
            phases[name] = phases.get(name, 0.0) + float(seconds)
    if steps <= 0:
        raise ValueError(f"{source}: no verify steps counted (not a speculative config?)")
    return StepCost(source, requests, wall, tokens, steps, phases)


def from_runs(config: Mapping[str, Any], prompt: str | None = None) -> StepCost | None:
    """Totals of a config's measured one-request runs that counted verify steps (one prompt's
    where given); None where it has none."""
    runs = [
        r for r in config.get("runs", [])
        if r.get("phase") == "measure" and r.get("ok") and r.get("verify_steps")
        and (prompt is None or r.get("prompt") == prompt)
    ]  # fmt: skip
    if not runs:
        return None
    return _total(
        "runs",
        (
            (1, float(r["wall_s"]), int(r["output_tokens"]), int(r["verify_steps"]),
             (r.get("extra") or {}).get("phase_s") or {})
            for r in runs
        ),
    )  # fmt: skip


def from_level(config: Mapping[str, Any], clients: int = 1) -> StepCost | None:
    """Totals of the measured rounds (warm-up left out, measured cleanly) of a config's load
    level of ``clients``; None where it ran no such level."""
    rounds = [r for r in rounds_of(config, clients) if r.ok and r.verify_steps]
    if not rounds:
        return None
    return _total(
        f"{clients} clients",
        (
            (r.requests, r.wall_s, r.output_tokens, int(r.verify_steps or 0),
             r.engine.get("phase_s") or {})
            for r in rounds
        ),
    )  # fmt: skip


def step_cost(config: Mapping[str, Any], clients: int = 1) -> StepCost:
    """A config's one-request step cost: from its runs, else from its load level of
    ``clients``."""
    found = from_runs(config) or from_level(config, clients)
    if found is None:
        name = config.get("name", "?")
        raise ValueError(
            f"{name}: no measured one-request runs and no load level of {clients} client(s) "
            "with verify steps; run it with the device timer (docs/gpu-run.md)"
        )
    return found


def config_named(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for config in doc.get("configs", []):
        if config.get("name") == name:
            return config  # type: ignore[no-any-return]
    names = ", ".join(str(c.get("name")) for c in doc.get("configs", []))
    raise ValueError(f"no config {name!r} in the results (it has {names or 'none'})")


def engine_of(config: Mapping[str, Any]) -> str:
    return str(config.get("engine_version") or config.get("engine") or "?")


def rows(costs: Sequence[tuple[str, StepCost]]) -> list[str]:
    """A table: one column per file, one row per figure; the last column the ratio of the
    first file's figure to the second's where there are two."""
    phases = sorted({p for _, c in costs for p in c.phase_s})
    lines = [" | ".join(["per verify step", *(label for label, _ in costs)])]

    def row(title: str, values: list[float], fmt: str, ratio: bool = True) -> None:
        cells = [format(v, fmt) for v in values]
        if ratio and len(values) == 2 and values[1]:
            cells.append(f"{values[0] / values[1]:.2f}x")
        lines.append(" | ".join([title, *cells]))

    lines.append(" | ".join(["measured from", *(c.source for _, c in costs)]))
    row("requests", [c.requests for _, c in costs], "d", ratio=False)
    row("verify steps a request", [c.steps / c.requests for _, c in costs], ".1f")
    row("tokens a step", [c.tokens_per_step for _, c in costs], ".2f")
    row("wall ms", [c.wall_per_step_ms for _, c in costs], ".3f")
    for phase in phases:
        row(f"{phase} GPU ms", [c.phase_per_step_ms().get(phase, 0.0) for _, c in costs], ".3f")
    row("untimed ms", [c.untimed_per_step_ms for _, c in costs], ".3f")
    row("output tok/s (wall)", [c.tokens / c.wall_s for _, c in costs], ".1f")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--config", default="dflash-b16")
    parser.add_argument("--clients", type=int, default=1)
    args = parser.parse_args(argv)
    costs = []
    for path in args.results:
        config = config_named(load_results(path), args.config)
        costs.append((f"{path.name} ({engine_of(config)})", step_cost(config, args.clients)))
        prompts = sorted({r["prompt"] for r in config.get("runs", []) if r.get("prompt")})
        for prompt in prompts:
            cost = from_runs(config, prompt)
            if cost is not None:
                print(f"{path.name} {prompt}: {cost.steps} steps, {cost.tokens_per_step:.2f} "
                      f"tokens a step, {cost.wall_per_step_ms:.3f} ms a step")  # fmt: skip
    print(f"{args.config}, one request at a time:")
    for line in rows(costs):
        print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
