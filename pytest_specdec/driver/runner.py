"""The runner: the driver's steps (steps.py), the concurrency sweep (sweep.py) and the
lossless reference (reference.py), each a :class:`Steps` subclass whose methods are the
steps, put together with the verdicts.

Both faces (the pytest plugin and the ``specdec`` CLI) drive this object; it knows nothing of
pytest. The order of a config is boot → warm up → measure → sweep → lossless → judge; each
step is one method here or in :class:`Steps`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pytest_specdec.core.results import RunRecord
from pytest_specdec.driver.boot import Server, resolve_configs
from pytest_specdec.driver.reference import ReferenceSteps
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.driver.stopping import budget_reason, decided_reason
from pytest_specdec.driver.sweep import SweepSteps
from pytest_specdec.measure.levels import levels_of
from pytest_specdec.verdict.baselines import BaselineError
from pytest_specdec.verdict.gate import adjust
from pytest_specdec.verdict.history import drift_for
from pytest_specdec.verdict.judge import Judgement, judge_baseline, judge_reference
from pytest_specdec.verdict.load import plain_config, with_level_alpha
from pytest_specdec.verdict.sessions import update_baseline
from pytest_specdec.verdict.stats import VerdictPolicy

__all__ = ["RunSettings", "Runner", "Server", "resolve_configs", "run_errors"]


class Runner(SweepSteps, ReferenceSteps):
    """One run of a suite: the driver's steps plus sweep, lossless reference and verdicts."""

    def skip_reason(self, name: str) -> str | None:
        """Why config ``name`` boots no further session: its machine time at
        --specdec-max-minutes, or (--specdec-adaptive) its verdicts decided (stopping.py). The
        plain config of speedup curves runs on while a config whose curve it is does (the
        reference of an A/B, while any judged config does), and a config with a curve boots
        two sessions at least, so that its speedup has sessions a side. Else None."""
        return self._skip_reason(name, None)

    def _skip_reason(self, name: str, doc: dict[str, Any] | None) -> str | None:
        """skip_reason on the results document ``doc`` (made here once, when first needed)."""
        rec = self.records.get(name)
        if rec is None:
            return None
        limit = self.settings.max_minutes
        if limit is not None and (over := budget_reason(name, rec.extra.get("cost", []), limit)):
            return over
        if not self.settings.adaptive:
            return None
        doc = doc if doc is not None else self.document()
        curves = speedup_curves(doc)
        others = [n for n, plain in curves.items() if plain == name]
        if name == self.settings.reference or others:
            others = self.judged_configs() if name == self.settings.reference else others
            if others and all(self._skip_reason(n, doc) for n in others):
                return f"{name}: the plain config of {', '.join(others)}, each of them stopped"
            return None
        booted = len(rec.extra.get("sessions", []))
        if name in curves and booted < 2:
            return None
        target = self.settings.target_mde
        try:  # decided as the gate will judge (Bonferroni over the configs and levels), the
            # MDE held to the target as the report will state it
            judgement = self.judge_for_gate(name, doc)
            reported = self.judge(name, doc=doc) if target is not None else None
        except BaselineError:  # not decided here; the config's gate test reports it
            return None
        levels = levels_of({"extra": rec.extra})
        measured = bool(rec.measured())
        stores = self.settings.update_baselines
        return decided_reason(judgement, measured, levels, booted, target, reported, stores)

    # --- judge ------------------------------------------------------------------------------

    def judged_configs(self) -> list[str]:
        return [c.name for c in self.configs if c.name != self.settings.reference]

    def judge(
        self, name: str, policy: VerdictPolicy | None = None, doc: dict[str, Any] | None = None,
        load_policy: VerdictPolicy | None = None,
    ) -> Judgement:  # fmt: skip
        """Verdict for one config: against --specdec-reference, else its stored baseline; its
        load levels with ``load_policy`` (default: ``policy``). ``doc``: the results document
        as it is now, when the caller has it."""
        doc = doc if doc is not None else self.document()
        by_name = {c["name"]: c for c in doc["configs"]}
        policy = policy or self.settings.policy
        ref, root = self.settings.reference, self.settings.baseline_dir
        if ref and name != ref:
            if ref not in by_name:
                raise ValueError(f"reference config {ref} has not been measured")
            return judge_reference(
                doc, by_name[name], by_name[ref], policy, load_policy, root,
                self.settings.same_machine,
            )  # fmt: skip
        return judge_baseline(
            doc, by_name[name], root, policy, self.settings.allow_mismatch, load_policy,
            self.settings.same_machine,
        )  # fmt: skip

    def judge_for_gate(self, name: str, doc: dict[str, Any] | None = None) -> Judgement:
        """Per-config gate during the run: Bonferroni over the judged configs (Holm's first
        step), and for the load levels over every (config, level) pair; the summary at the end
        of the run applies full Holm across them. ``doc``: as for :meth:`judge`."""
        m = max(1, len(self.judged_configs()))
        base = self.settings.policy
        levels = max(1, len(self.settings.concurrency))
        return self.judge(
            name,
            replace(base, alpha=base.alpha / m),
            doc,
            load_policy=with_level_alpha(base, m * levels),
        )

    def judge_all(self) -> list[Judgement]:
        measured = {n for n, r in self.records.items() if r.measured() or r.extra.get("load")}
        names = [n for n in self.judged_configs() if n in measured]
        doc = self.document()  # one document for every config's verdict
        return adjust([self.judge(n, doc=doc) for n in names], self.settings.policy)

    def drifts(self, doc: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Drops that tonight reveals in each measured config's nightly history (a change
        point, see verdict/history.py); judged against the baselines as they were."""
        doc = doc if doc is not None else self.document()
        found = []
        for cfg in doc["configs"]:
            if any(r.get("phase") == "measure" for r in cfg.get("runs", [])):
                point = drift_for(doc, cfg, self.settings.baseline_dir)
                if point is not None:
                    found.append({"config": cfg["name"], "message": point.describe(),
                                  **point.to_dict()})  # fmt: skip
        self.drift = found
        return found

    def update_baselines(self, doc: dict[str, Any] | None = None) -> list[str]:
        """Append every measured config's session to its baseline; one line per config."""
        doc = doc if doc is not None else self.document()
        lines = []
        for cfg in doc["configs"]:
            try:
                lines.append(
                    update_baseline(
                        doc, cfg, self.settings.baseline_dir, self.settings.allow_mismatch
                    )
                )
            except (ValueError, OSError) as exc:
                lines.append(f"{cfg['name']}: NOT UPDATED: {exc}")
        return lines


def speedup_curves(doc: dict[str, Any]) -> dict[str, str]:
    """Each config of the results document ``doc`` with load levels measured -> the plain
    config of the run its speedup curve is taken against (verdict/load.py's plain_config),
    where there is one."""
    curves = {}
    for cfg in doc["configs"]:
        plain = plain_config(doc, cfg) if levels_of(cfg) else None
        if plain is not None:
            curves[str(cfg["name"])] = str(plain["name"])
    return curves


def run_errors(runs: Iterable[RunRecord]) -> list[str]:
    """One line per failed run: what the test reports (an error is never averaged away)."""
    return [f"{r.config}/{r.prompt} run {r.run}: {r.error}" for r in runs if r.error is not None]
