"""``specdec`` subcommands that work on results and baseline files (no engine needed):
``baseline update|show``, ``compare``,
``report markdown|chart|trend|benchmark-json|merge|site``."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_specdec.core.outputs import results_problem
from pytest_specdec.core.results import ResultsError, atomic_write_json, load_results
from pytest_specdec.core.values import SCORES, fail_on, fraction, probability
from pytest_specdec.report.charts import ChartInputError, ChartsUnavailable
from pytest_specdec.report.merge import MergeError
from pytest_specdec.report.site_assets import SiteUnavailable
from pytest_specdec.report.site_data import SiteError
from pytest_specdec.report.table import load_verdict_lines, render_table
from pytest_specdec.verdict.acceptance import accept_summary_lines
from pytest_specdec.verdict.baselines import BaselineError, key_for, key_mismatch, load_baseline
from pytest_specdec.verdict.gate import adjust, failures, not_gating
from pytest_specdec.verdict.history import HistoryUnavailable
from pytest_specdec.verdict.judge import UNJUDGEABLE, judge_reference
from pytest_specdec.verdict.load import UNJUDGEABLE as LOAD_UNJUDGEABLE
from pytest_specdec.verdict.sessions import update_baseline, with_score
from pytest_specdec.verdict.stats import VerdictPolicy


def baseline_update(args: argparse.Namespace) -> int:
    """Append every config of a results file to its baseline; exit 1 if any was refused."""
    results = with_score(load_results(args.results), args.score)
    status = 0
    for cfg in results["configs"]:
        try:
            print(update_baseline(results, cfg, args.baseline_dir, args.allow_mismatch))
        except (BaselineError, ValueError, OSError) as exc:
            print(f"{cfg['name']}: NOT UPDATED: {exc}")
            status = 1
    return status


def baseline_show(args: argparse.Namespace) -> int:
    """One row per baseline file: sessions, latest and mean suite tok/s, engine version."""
    if not args.baseline_dir.is_dir():
        raise BaselineError(f"--baseline-dir {args.baseline_dir} is not a folder: fix the path")
    paths = sorted(p for p in args.baseline_dir.rglob("*.json") if not p.name.startswith("."))
    rows = [["baseline", "sessions", "suite tok/s (last)", "suite tok/s (mean)", "engine", "last"]]
    for path in paths:
        baseline = load_baseline(path)
        if baseline is None:
            continue
        history = baseline.suite_history()
        last = f"{math.exp(history[-1].mean_log):.1f}" if history else "-"
        mean = (
            f"{math.exp(sum(h.mean_log for h in history) / len(history)):.1f}" if history else "-"
        )
        latest = baseline.sessions[-1] if baseline.sessions else {}
        rows.append([
            str(path.relative_to(args.baseline_dir)), str(len(baseline.sessions)), last, mean,
            str(latest.get("engine_version") or "-"), str(latest.get("added_at") or "-"),
        ])  # fmt: skip
    if len(rows) == 1:
        print(f"no baselines under {args.baseline_dir}")
        return 0
    print(render_table(rows))
    return 0


def compare(args: argparse.Namespace) -> int:
    """The verdict engine on two results files: each config of NEW against the same in OLD
    (or, with ``--reference``, against OLD's config of that name). Exit 1 where a verdict fails
    (``--fail-on``) or a config of NEW could not be judged: it failed to boot or measure there,
    or its runs cannot be compared; 2 where nothing could."""
    old, new = load_results(args.old), with_score(load_results(args.new), args.score)
    old_hash, new_hash = ((d.get("workload") or {}).get("sha256") for d in (old, new))
    if old_hash != new_hash:
        print(f"specdec: error: the workloads differ (sha256 {old_hash} vs {new_hash}): "
              "results of different prompt suites cannot be compared")  # fmt: skip
        return 2
    policy = VerdictPolicy(
        alpha=args.alpha, min_delta=args.min_delta, accept_delta=args.accept_delta
    )
    before = {c["name"]: c for c in old["configs"]}
    new_names = set(_names_of(new))
    failed = {c["name"]: c["error"] for c in new["configs"] if c.get("error")}
    against = _against(args, old, before)
    wanted = (lambda n: n in before) if against is None else (lambda n: n != args.reference)
    both = [c for c in new["configs"] if c["name"] not in failed and wanted(c["name"])]
    if not both and not failed and against is not None:
        raise ResultsError(
            f"{args.new} has no config besides the reference {args.reference} "
            f"({', '.join(_names_of(new)) or 'none'}): nothing to judge against it"
        )
    if not both and not failed:
        raise ResultsError(
            f"no config of {args.new} is in {args.old} "
            f"({', '.join(_names_of(new)) or 'it has none'}; {args.old} has "
            f"{', '.join(_names_of(old)) or 'none'}): nothing to compare"
        )
    ref = {c["name"]: against or before[c["name"]] for c in both}
    judged = adjust([judge_reference(new, cfg, ref[cfg["name"]], policy) for cfg in both], policy)
    now = {c["name"]: c for c in both}
    for j in judged:
        print(f"{j.config}: {j.message}")
        differ = _setups_differ(old, against or before[j.config], new, now[j.config], against)
        for note in [*j.notes, *differ]:
            print(f"{j.config}: note: {note}")
        for line in accept_summary_lines(j.config, j.acceptance):
            print(line)
    for line in load_verdict_lines(judged):
        print(line)
    for name, error in failed.items():
        print(f"{name}: ERROR: it failed in {args.new}, so it has no verdict: {error}")
    for side, names in ((args.old, new_names - set(before)),
                        (args.new, set(before) - new_names)):  # fmt: skip
        if names and against is None:
            print(f"not in {side}: {', '.join(sorted(names))}")
    gates = args.provisional == "gate"
    if not gates:
        for line in not_gating(judged, args.fail_on):
            print(line)
    unjudged = [j for j in judged if j.status == UNJUDGEABLE
                or (j.load is not None and j.load.status == LOAD_UNJUDGEABLE)]  # fmt: skip
    return 1 if failures(judged, args.fail_on, gates) or failed or unjudged else 0


def _against(
    args: argparse.Namespace, old: Mapping[str, Any], before: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """With ``--reference NAME``: OLD's config NAME, which every config of NEW is then judged
    against (a tree against a chain in one results file: OLD and NEW the same); else None."""
    if args.reference is None:
        return None
    found: Mapping[str, Any] | None = before.get(args.reference)
    if found is None:
        raise ResultsError(
            f"--reference {args.reference}: no such config in {args.old} (it has "
            f"{', '.join(_names_of(old)) or 'none'}); name one of those"
        )
    if found.get("error"):
        raise ResultsError(
            f"--reference {args.reference}: it failed in {args.old}, so nothing can be judged "
            f"against it: {found['error']}"
        )
    return found


def _names_of(doc: Mapping[str, Any]) -> list[str]:
    return [str(c["name"]) for c in doc["configs"]]


# What a config and the reference it is judged against share by design: with --reference,
# only these are compared (the config's own name, flags, drafter and engine args differ).
_SHARED_WITH_REFERENCE = ("hardware", "model", "max_tokens", "sampling", "protocol")


def _setups_differ(
    old: Mapping[str, Any], before: Mapping[str, Any], new: Mapping[str, Any],
    now: Mapping[str, Any], reference: Mapping[str, Any] | None,
) -> list[str]:  # fmt: skip
    """A note where NEW's config ``now`` ran another setup than OLD's ``before`` (engine,
    model, hardware, flags, output length): the verdict then compares two setups, not one
    over time. Against a ``reference`` the two differ by design, so only what they should
    share is compared (hardware, target model, output length, sampling, request protocol):
    a reference from another machine or run settings would otherwise read as the config's
    own speedup."""
    was, is_ = key_for(old, before), key_for(new, now)
    if reference is None:
        diff = key_mismatch(was, is_)
        what = "the two setups, not one setup over time"
    else:
        diff = key_mismatch({f: was.get(f) for f in _SHARED_WITH_REFERENCE},
                            {f: is_.get(f) for f in _SHARED_WITH_REFERENCE})  # fmt: skip
        what = f"{before['name']} on one setup with this config on another, not the two alone"
    if not diff:
        return []
    return [f"OLD and NEW ran different setups ({'; '.join(diff)}): this verdict compares "
            f"{what}"]  # fmt: skip


def report_merge(args: argparse.Namespace) -> int:
    """One report from many runners' results files, grouped by hardware key."""
    from pytest_specdec.report import merge

    files, notes = merge.load_many([Path(p) for p in args.paths])
    groups = merge.merge(files)
    if args.json is not None:
        atomic_write_json(args.json, merge.document(groups, notes))
    print(merge.markdown(groups, notes), end="")
    return 0


class ReportArgsError(ValueError):
    """A report's paths that do not fit its kind; the message names them and the fix."""


USAGE = {"markdown": "RESULTS", "chart": "RESULTS OUT.png", "benchmark-json": "RESULTS OUT.json",
         "trend": "BASELINES... OUT.png", "site": "OUT_DIR"}  # fmt: skip


def report_paths(kind: str, paths: list[str]) -> tuple[list[Path], Path | None]:
    """A report's inputs and the file it writes, checked before anything is read: as many
    paths as its kind takes, a chart named ``.png`` (it is one), and no output that is one of
    its inputs or another run's results (writing it would destroy them)."""
    given = [Path(p) for p in paths]
    writes = kind in ("chart", "benchmark-json", "trend")
    count_ok = len(given) >= 2 if kind == "trend" else len(given) == 1 + writes
    if not count_ok:
        raise ReportArgsError(
            f"report {kind} takes {USAGE[kind]}, got {len(given)} path(s): {' '.join(paths)}"
            + ("; name the file to write last" if writes and len(given) < 2 else "")
        )
    if not writes:
        return given, None
    *inputs, out = given
    if kind in ("chart", "trend") and out.suffix.lower() != ".png":
        raise ReportArgsError(
            f"report {kind} writes a PNG chart, and its last path {out} is not named .png "
            f"(it would be overwritten with the chart): give {USAGE[kind]}"
        )
    for source in inputs:
        if out.resolve() == source.resolve() or (
            out.exists() and source.exists() and out.samefile(source)
        ):
            raise ReportArgsError(f"report {kind} would write over its input {source}: name "
                                  "another file to write")  # fmt: skip
    if out.is_file() and out.suffix.lower() != ".png" and results_problem(out) is None:
        raise ReportArgsError(f"report {kind} would replace {out}, which holds a run's results: "
                              "name a new file to write")  # fmt: skip
    return inputs, out


def report(args: argparse.Namespace) -> int:
    from pytest_specdec.report import export
    from pytest_specdec.report.charts import results_chart, trend_chart

    if args.kind == "merge":
        return report_merge(args)
    inputs, out = report_paths(args.kind, args.paths)
    if args.kind == "site":
        from pytest_specdec.report.site import build_site

        print(build_site(inputs[0], args.baseline_dir, args.results).describe())
        return 0
    if out is not None and args.kind == "trend":
        trend_chart(inputs, out)
        print(out)
        return 0
    results: dict[str, Any] = load_results(inputs[0])
    if out is None:
        print(export.markdown_summary(results))
    elif args.kind == "benchmark-json":
        atomic_write_json(out, export.benchmark_json(results))
        print(out)
    else:
        results_chart(results, out)
        print(out)
    return 0


def add_compare(sub: Any) -> None:
    """``specdec compare`` and its options."""
    cmp = sub.add_parser("compare", help="judge NEW.json against OLD.json (same verdict engine)")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    cmp.add_argument("--alpha", type=probability, default=VerdictPolicy().alpha,
                     help="false-alarm rate of each verdict (default %(default)s)")  # fmt: skip
    cmp.add_argument("--min-delta", type=fraction, default=VerdictPolicy().min_delta,
                     help="smallest change in tok/s that counts (default %(default)s)")  # fmt: skip
    cmp.add_argument("--accept-delta", type=fraction, default=VerdictPolicy().accept_delta,
                     help="smallest change in accept length that counts (default "
                     "%(default)s)")  # fmt: skip
    cmp.add_argument("--fail-on", type=fail_on, default=("regressed",),
                     help="comma list: regressed, inconclusive, improved, unchanged (every "
                     "verdict), or tok-/accept-/load- each (one) (default: regressed)")  # fmt: skip
    cmp.add_argument(
        "--provisional",
        choices=("gate", "report"),
        default="gate",
        help="provisional verdicts (one session a side) fail like final ones, or are reported",
    )
    cmp.add_argument("--score", choices=SCORES, default=None,
                     help="judge each run's e2e or decode tok/s (default: what NEW was judged "
                     "on)")  # fmt: skip
    cmp.add_argument("--reference", default=None, metavar="NAME",
                     help="judge every config of NEW against OLD's config NAME instead of its "
                     "namesake (OLD and NEW may be one file: an A/B within a run, each load "
                     "level's speedup and the crossover too)")  # fmt: skip
    cmp.set_defaults(func=compare)


def add_commands(sub: Any) -> None:
    """Register the subcommands on the ``specdec`` argument parser."""
    base = sub.add_parser("baseline", help="update or show stored baselines").add_subparsers(
        dest="action", required=True
    )
    upd = base.add_parser("update", help="append a results file's sessions to the baselines")
    upd.add_argument("results", type=Path)
    upd.add_argument("--allow-mismatch", action="store_true")
    upd.add_argument("--score", choices=SCORES, default=None,
                     help="store each run's e2e or decode tok/s (default: what the results "
                     "file was judged on); the score is part of the baseline key")  # fmt: skip
    upd.set_defaults(func=baseline_update)
    show = base.add_parser("show", help="list baseline files and their history")
    show.set_defaults(func=baseline_show)
    for p in (upd, show):
        p.add_argument("--baseline-dir", type=Path, default=Path("baselines"))

    add_compare(sub)

    rep = sub.add_parser("report", help="Markdown, charts, pytest-benchmark JSON, merge")
    rep.add_argument(
        "kind", choices=("markdown", "chart", "trend", "benchmark-json", "merge", "site")
    )
    rep.add_argument(
        "paths", nargs="+",
        help="markdown: RESULTS; chart: RESULTS OUT.png; benchmark-json: RESULTS OUT.json; "
        "trend: BASELINES... OUT.png (the last path is written; an input is never overwritten); "
        "merge: RESULTS... (files or folders of several runners; Markdown on stdout); "
        "site: OUT_DIR (the nightly dashboard, docs/dashboard.md)",
    )  # fmt: skip
    rep.add_argument("--json", type=Path, help="merge: also write the merged JSON here")
    rep.add_argument("--baseline-dir", type=Path, default=Path("baselines"),
                     help="site: the baseline store (default %(default)s)")  # fmt: skip
    rep.add_argument("--results", type=Path, nargs="*", default=[],
                     help="site: nightly results files, or folders of them")  # fmt: skip
    rep.set_defaults(func=report)


ERRORS = (
    ResultsError, BaselineError, json.JSONDecodeError, ChartsUnavailable, ChartInputError,
    MergeError, HistoryUnavailable, SiteError, SiteUnavailable, ReportArgsError,
)  # fmt: skip
