"""The workflows ``specdec init`` writes, made from this repository's own.

``pytest_specdec/templates/`` holds copies of ``.github/workflows/nightly-gpu.yml`` and
``update-baselines.yml`` (tests/test_init.py checks that they are the same bytes). A user's
repository gets them with what is this repository's replaced: pytest-specdec installed from the
package index at this version instead of from the checkout, the runner labels, engine and
nightly configs that ``specdec init`` was given, the suite file ``suites/specdec.toml`` (for
the load job too, which then names its load levels itself and keeps its baselines with the
suite's), and no bisect job (its build command is a script of this repository). Each edit
names the text it replaces and how often that text occurs, so a change to the source workflow
that an edit no longer fits fails loudly (:class:`TemplateError`) instead of writing a
half-edited workflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from pytest_specdec.cli.layout import Layout
from pytest_specdec.core.configs import preset_configs

OWN_LABELS = '["self-hosted", "linux", "gpu", "h200"]'
NIGHTLY_COMMENT = "  # The nightly set (`specdec init --configs`); a dispatch may name others."
LOAD_COMMENT = """\
  # The load set: the plain config and the nightly set's speculative configs, but those that
  # reset the engine's caches before every request (flush), which a load level does not do."""
OWN_INSTALL = 'python -m pip install --disable-pip-version-check -e ".[dev]"'
# The plan job's condition that leaves the nightly to a bisect dispatch (no bisect job there).
NOT_BISECT = (
    "    # A bisect dispatch runs the bisect job instead of the nightly (the negation of\n"
    "    # its condition); the jobs that need this one are skipped with it.\n"
    "    if: github.event_name != 'workflow_dispatch' || inputs.bisect_refs == ''"
    " || inputs.bisect_config == ''\n"
)
# The load job here reads its levels, rounds and output length from the load suite file and its
# baselines (baselines/load). The user's suite file has no levels: the job names them, and
# measures at the suite's own output length, so its sessions join the suite's baselines.
OWN_LEVELS = "SPECDEC_LOAD_LEVELS: ${{ vars.SPECDEC_LOAD_LEVELS }}  # empty: the suite file's"
LEVELS = "SPECDEC_LOAD_LEVELS: ${{ vars.SPECDEC_LOAD_LEVELS || '1,4,16,64' }}"
OWN_TOKENS = """\
      # 128 tokens a request: the output length of the load baselines (part of their key) and
      # of the budget's figures.
"""
OWN_TOKENS_FLAG = "          --specdec-max-tokens 128\n"
OWN_BUDGET = """\
    # The budget. On the H200 a config's whole curve (1, 4, 16 and 64 clients, 4 rounds a
    # level, 128 tokens a request) cost 2.3 to 3.6 GPU-minutes per server session, its boot
    # included (docs/gpu-run.md, "A seventh H200"). Two sessions a night against the stored
    # ones leave a level's MDE above 5% at 16 and 64 clients, where the host's pace spreads the
    # boots 2-3%; five a night against twenty stored bring every level of baseline and
    # standalone-d16 to 5% or less, 11.5-11.8 GPU-minutes a config (docs/gpu-run.md, "A
    # thirteenth H200"). So a config boots up to SPECDEC_LOAD_SESSIONS sessions (5), stops once
    # every level's verdict is decided (--specdec-adaptive), and boots none that would take its
    # sessions past SPECDEC_LOAD_MAX_MINUTES (15) GPU-minutes as the run records them: the load
    # set, 4 configs, takes about 60 minutes at most, a night whose levels decide early less. The
    # suite step gets 90 (the worst case and half again), the job 15 more for the environment,
    # the install and the lint. More configs: 15 minutes more each, 22.5 with the margin.
    timeout-minutes: 105
"""
BUDGET = """\
    # The budget: a config boots up to SPECDEC_LOAD_SESSIONS server sessions (5), stops once
    # every level's verdict is decided (--specdec-adaptive), and boots none that would take its
    # sessions past SPECDEC_LOAD_MAX_MINUTES (15) GPU-minutes as the run records them (the
    # report's cost line). The suite step gets 90 minutes (4 configs at 15, and half again),
    # the job 15 more. On pytest-specdec's H200 a whole curve (1, 4, 16 and 64 clients, 4 rounds
    # a level, 128 tokens a request) cost 2.3 to 3.6 GPU-minutes per server session, boot
    # included; here a level has the suite's rounds (5 by default) and requests its output
    # length (256 tokens by default), on your models: time a night and set them. More configs:
    # 22.5 minutes more each.
    timeout-minutes: 105
"""


class TemplateError(RuntimeError):
    """A source workflow no longer has the text an edit replaces."""


@dataclass(frozen=True)
class Edit:
    old: str
    new: str
    count: int = 1  # how often ``old`` occurs in the source


def template(name: str) -> str:
    return (resources.files("pytest_specdec") / "templates" / name).read_text(encoding="utf-8")


def apply(name: str, text: str, edits: list[Edit]) -> str:
    for edit in edits:
        found = text.count(edit.old)
        if found != edit.count:
            raise TemplateError(
                f"{name}: {edit.old[:60]!r} occurs {found} time(s), the edit expects "
                f"{edit.count}; fit pytest_specdec/cli/workflows.py to the workflow"
            )
        text = text.replace(edit.old, edit.new)
    return text


def between(name: str, text: str, start: str, end: str | None) -> str:
    """The text from ``start`` up to ``end`` (or the end of the file), each found once."""
    for marker in (start, end):
        if marker is not None and text.count(marker) != 1:
            raise TemplateError(f"{name}: {marker[:60]!r} is not in the workflow exactly once")
    first = text.index(start)
    return text[first : text.index(end, first) if end is not None else len(text)]


def nightly_header(layout: Layout) -> str:
    return f"""\
# Written by `specdec init` (pytest-specdec {layout.version}) from pytest-specdec's own
# nightly-gpu.yml.
#
# Every night, each spec config against its stored baseline on a self-hosted GPU runner: one
# job per config. Each job uploads its results JSON, JUnit XML and engine logs as an artifact
# and writes the verdict table to the job summary. A job fails only when pytest does: a
# REGRESSED verdict, a lossless divergence, or a crash (and a config that does not lint); with
# the variable SPECDEC_FAIL_ON=regressed,drift also a drop that tonight reveals in the nightly
# history (a change point). One more job measures speculation under load on the same runners:
# the plain config (baseline) and the speculative configs in one run, each at concurrent
# closed-loop clients (the load levels), each speculative config's speedup curve over the plain
# one with its crossover, the concurrency where speculation stops paying, and every level judged
# against its stored baseline once the baselines hold load levels: store them on the runner with
#   pytest suites/test_concurrency.py --specdec-concurrency 1,4,16,64 --specdec-sessions 5 \\
#       --spec-config {",".join(load_configs(layout))} --specdec-update-baselines
# It fails on a REGRESSED level or a lost crossover (a level that no longer pays where it paid in
# the baselines). The engine needs as many requests at once as the largest level (SGLang
# --max-running-requests, vLLM --max-num-seqs, llama.cpp -np: the suite file's extra_args; a
# load suite file that extends the suite's can set them and its own baseline_dir).
# A last job merges every runner's results into one report, grouped by hardware key (the load
# levels in a report of their own), lists the change points of the history and builds the
# dashboard (`specdec report site`) from the stored history and tonight's results, uploaded as
# the artifact specdec-dashboard. With the variable SPECDEC_PAGES=true (and Settings > Pages >
# Source: GitHub Actions) a last job publishes it to GitHub Pages.
#
# Repository variables (Settings > Secrets and variables > Actions > Variables), all optional:
#   SPECDEC_GPU_RUNNER_LABELS  JSON list of runner labels; default {labels(layout)}
#   SPECDEC_RUNNER_PYTHON      the runner's interpreter that has the engine (default: python3);
#                              the job's virtualenv is made from it with its site-packages
#   SPECDEC_SGLANG_PYTHON      another interpreter that has SGLang, if it is not that one
#   SPECDEC_SUITE_FILE         the suite file (default suites/specdec.toml)
#   SPECDEC_FAIL_ON            outcomes that fail a job (default: regressed; e.g. regressed,drift)
#   SPECDEC_LOAD_CONFIGS       the load job's configs (default: the load set below); the plain
#                              config baseline is measured with them in any case
#   SPECDEC_LOAD_SUITE_FILE    its suite file (default suites/specdec.toml)
#   SPECDEC_LOAD_LEVELS        its levels: concurrent clients (default 1,4,16,64)
#   SPECDEC_LOAD_SESSIONS      its server sessions per config at most (default 5; a dispatch
#                              may say); a config stops once every level is decided
#   SPECDEC_LOAD_MAX_MINUTES   the GPU-minutes a config's sessions may hold (default 15)
#   SPECDEC_LOAD_FAIL_ON       outcomes that fail it (default: regressed,crossover)
#   SPECDEC_PAGES              "true" publishes the dashboard to the repository's GitHub Pages
# Secret HF_TOKEN (optional): for gated models on the hub; only the steps that run the engine
# (its flag lint, the suite, the load levels) are given it.
#
# A dispatch measures the configs it names (the load job: with baseline) and runs no load job
# with load_levels unticked.
"""


def labels(layout: Layout) -> str:
    return json.dumps(list(layout.runner_labels))


def load_configs(layout: Layout) -> tuple[str, ...]:
    """The load set: ``baseline`` (the plain config of the speedup curves) and the nightly set's
    speculative configs but those with ``flush``, whose caches a load level does not reset
    (SGLang's ngram would recall the outputs of the prompts every client repeats)."""
    presets = {c.name: c for c in preset_configs() if c.engine == layout.engine}
    return ("baseline", *(
        name for name in layout.nightly_configs()
        if name in presets and presets[name].speculative and not presets[name].flush
    ))  # fmt: skip


def shared_edits(layout: Layout, installs: int, runs_on: int) -> list[Edit]:
    return [
        Edit(OWN_INSTALL, OWN_INSTALL.replace('-e ".[dev]"', f'"pytest-specdec=={layout.version}"'),
             installs),
        Edit(OWN_LABELS, labels(layout), runs_on + 1),  # and the runner_labels input's text
        Edit("        default: sglang\n", f"        default: {layout.engine}\n"),
    ]  # fmt: skip


def nightly(layout: Layout) -> str:
    name = "nightly-gpu.yml"
    text = template(name)
    for start, end in (
        ("      bisect_refs:\n", "\n# No permission"),  # the bisect job's inputs
        ("  bisect:\n", None),  # the bisect job, the last
    ):
        text = text.replace(between(name, text, start, end), "")
    header = between(name, text, "# Every night, each spec config", "\non:\n")
    own_set = between(name, text, "  # The nightly set:", "\n\njobs:")
    configs = ",".join(layout.nightly_configs())
    load = ",".join(load_configs(layout))
    return apply(name, text, [
        Edit(header, nightly_header(layout)),
        Edit(own_set, f"{NIGHTLY_COMMENT}\n  NIGHTLY_CONFIGS: {configs}\n"
                      f"{LOAD_COMMENT}\n  NIGHTLY_LOAD_CONFIGS: {load}"),
        Edit(NOT_BISECT, ""),
        *shared_edits(layout, 2, 2),  # the benchmark and load jobs
        Edit("inputs.engine || 'sglang'", f"inputs.engine || '{layout.engine}'", 6),
        Edit('".[site]"', f'"pytest-specdec[site]=={layout.version}"'),
        Edit("'suites/specdec-gpu.toml'", "'suites/specdec.toml'"),
        Edit("'suites/specdec-gpu-load.toml'", "'suites/specdec.toml'"),
        Edit(OWN_LEVELS, LEVELS),
        Edit(OWN_TOKENS, ""),
        Edit(OWN_TOKENS_FLAG, ""),
        Edit(OWN_BUDGET, BUDGET),
    ])  # fmt: skip


def update_baselines(layout: Layout) -> str:
    name = "update-baselines.yml"
    written = (
        f"# Written by `specdec init` (pytest-specdec {layout.version}) from pytest-specdec's own\n"
        f"# {name}.\n#\n"
    )
    return apply(name, template(name), [
        Edit("name: update-baselines\n\n", f"name: update-baselines\n\n{written}"),
        Edit("to have ci.yml run on it", "to have your CI run on it"),
        *shared_edits(layout, 1, 1),
    ])  # fmt: skip


def workflows(layout: Layout) -> dict[str, str]:
    """``.github/workflows/``: the nightly (with the merged report and the dashboard) and the
    baseline update."""
    return {
        ".github/workflows/nightly-gpu.yml": nightly(layout),
        ".github/workflows/update-baselines.yml": update_baselines(layout),
    }
