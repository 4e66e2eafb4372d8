"""The load levels, presented: per config a row per level (throughput with its CI, decode and
TTFT percentiles, accept length, what the engine did, what the level cost), the level verdicts,
the speedup curve's crossover, and the curves as a Mermaid chart for Markdown. Rows only: the
terminal table and the Markdown report render them (table.py, export.py). Works on the dicts of
a results document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.measure.host import host_summary
from pytest_specdec.measure.levels import (
    LevelSummary,
    LoadLimits,
    RoundResult,
    decode_passes,
    gauge_read_summary,
    gc_note,
    levels_of,
    no_forward_s,
    observed_notes,
    phase_means,
    rounds_of,
    summarize_level,
)
from pytest_specdec.verdict.work import gpu_work_s

LEVEL_HEADER = ["clients", "rounds", "out tok/s ±95%", "decode p50/p99", "TTFT p50/p99 ms",
                "accept", "engine", "s"]  # fmt: skip
VERDICT_HEADER = ["config", "clients", "verdict", "ratio [90% CI]", "p raw / Holm", "MDE (δ)",
                  "accept Δ", "cause", "GPU work"]  # fmt: skip


def _num(value: float | None, fmt: str = ".0f") -> str:
    return "-" if value is None else format(value, fmt)


def _engine_cell(level: LevelSummary, limits: LoadLimits) -> str:
    notes = []
    if level.max_queued:
        notes.append(f"queued ≤{level.max_queued:.0f}")
    elif limits.slots is not None and level.clients > limits.slots:
        notes.append(f"queued (slots {limits.slots})")
    if level.outside_graphs:
        notes.append(f"no graph x{level.outside_graphs}")
    elif limits.graph_max_batch is not None and level.clients > limits.graph_max_batch:
        notes.append(f"no graph > {limits.graph_max_batch}")
    if level.prefill_outside_graphs:
        notes.append(f"eager prefill {level.prefill_outside_graphs}/{level.prefill_batches}")
    elif limits.prefill_graphs_off is not None:
        notes.append("eager prefill")
    if level.engine_gc_pauses:
        notes.append(f"long GC x{level.engine_gc_pauses}")
    return ", ".join(notes) or "-"


def level_summaries(config: Mapping[str, Any]) -> list[LevelSummary]:
    """Each load level of a config over all its sessions' rounds, ascending."""
    return [summarize_level(rounds_of(config, c)) for c in levels_of(config)]


def limits_of(config: Mapping[str, Any]) -> LoadLimits:
    found = (config.get("extra") or {}).get("load_limits") or {}
    return LoadLimits(**{k: v for k, v in found.items() if k in LoadLimits.__dataclass_fields__})


def level_rows(config: Mapping[str, Any]) -> list[list[str]]:
    """The measurement rows of a config's load levels (without the header)."""
    limits = limits_of(config)
    rows = []
    for lv in level_summaries(config):
        tput = _num(lv.output_tok_per_s, ".1f")
        if lv.ci_half is not None:
            tput += f" ±{lv.ci_half:.1%}"
        rounds = str(lv.rounds) + (f" ({lv.failed_rounds} failed)" if lv.failed_rounds else "")
        decode = f"{_num(lv.decode_tok_per_s['p50'])}/{_num(lv.decode_tok_per_s['p99'])}"
        ttft = "/".join(_num(None if v is None else v * 1000) for v in lv.ttft_s.values())
        rows.append([str(lv.clients), rounds, tput, decode, ttft,
                     _num(lv.accept_length, ".2f"), _engine_cell(lv, limits),
                     f"{lv.wall_s:.0f}"])  # fmt: skip
    return rows


def limits_line(name: str, config: Mapping[str, Any]) -> str:
    """What the engine's command line allowed at once, and the level notes it implies."""
    limits = limits_of(config)
    slots = "its default" if limits.slots is None else f"{limits.slots} ({limits.slots_flag})"
    graphs = ""
    if limits.graph_max_batch == 0:
        graphs = f"; CUDA graphs off ({limits.graph_flag})"
    elif limits.graph_max_batch is not None:
        graphs = f"; CUDA graphs up to batch {limits.graph_max_batch} ({limits.graph_flag})"
    rounds = rounds_of(config)
    per = len({(r.session, r.clients, r.round) for r in rounds}) / max(1, len(levels_of(config)))
    frozen = (config.get("extra") or {}).get("engine_gc")
    frozen_note = f"; the engine's garbage collector {frozen} (freeze_gc)" if frozen else ""
    return (
        f"{name}: load levels: closed-loop clients, each covering the workload once per round, "
        f"{per:.0f} rounds per level; requests at once: {slots}{graphs}{frozen_note}"
    )


def level_notes(name: str, config: Mapping[str, Any]) -> list[str]:
    """The levels the engine queued or ran outside its CUDA graphs, by its settings and by
    what it reported."""
    limits = limits_of(config)
    out = []
    for lv in level_summaries(config):
        notes = observed_notes(lv) or limits.notes(lv.clients)
        collected = gc_note(lv)
        notes += [collected] if collected else []
        out += [f"{name} at {lv.clients} clients: {n}" for n in notes]
        rounds = rounds_of(config, lv.clients)
        phases = phase_means([r for r in rounds if not r.warmup])  # the measured rounds
        if phases:
            untimed = draft_untimed(config, phases)
            spent = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in phases.items())
            spent += idle_text(no_forward_s(rounds), untimed) + step_text(rounds, untimed)
            out.append(f"{name} at {lv.clients} clients: GPU time per round by phase: {spent}")
        host = host_summary([r.engine.get("host") or {} for r in rounds if not r.warmup])
        if host:
            out.append(f"{name} at {lv.clients} clients: host CPU over {host}")
        reads = gauge_read_summary(rounds)
        if reads:
            out.append(f"{name} at {lv.clients} clients: {reads}")
        short = short_note(rounds)
        if short:
            out.append(f"{name} at {lv.clients} clients: {short}")
    return out


def short_note(rounds: Sequence[RoundResult]) -> str | None:
    """How many of the measured rounds' requests ended at EOS before ``max_tokens`` (a run
    without ``ignore_eos``): such rounds did unequal work, so their throughput is not the
    engine's alone. None where none did."""
    measured = [r for r in rounds if not r.warmup]
    short = sum(int(r.engine.get("short_requests") or 0) for r in measured)
    if not short:
        return None
    total = sum(r.requests for r in measured)
    return (f"{short} of {total} requests ended at EOS before max_tokens, so the rounds did "
            "unequal work; --specdec-ignore-eos (or [suite] ignore_eos = true) decodes every "
            "request in full")  # fmt: skip


def draft_untimed(config: Mapping[str, Any], phases: Mapping[str, float]) -> bool:
    """A config with a draft model whose engine timed no draft phase (SGLang's DFLASH, 0.5.17's
    and the DDTree fork's, times its target's verify and extend alone): the time outside the
    timed phases then holds the draft's forward too. A config without a draft model (NGRAM)
    drafts on the host."""
    identity = config.get("config") or {}
    timed = bool(phases) and not any("draft" in k for k in phases)
    return timed and bool(identity.get("draft"))


def idle_text(idle: tuple[float, float] | None, untimed: bool) -> str:
    """``; no forward 350 ms (7.6% of the round)``, or where the draft is untimed ``; untimed
    ...`` naming what it holds (empty: the rounds' time could not be split)."""
    if idle is None:
        return ""
    share = f"{idle[1]:.1%} of the round"
    if untimed:
        return (
            f"; untimed {idle[0] * 1000:.0f} ms ({share}: the host's part and the draft's "
            "forward, which the engine does not time)"
        )
    return f"; no forward {idle[0] * 1000:.0f} ms ({share})"


def step_text(rounds: Sequence[RoundResult], untimed: bool = False) -> str:
    """``; 661 decode steps a round, 5.90 ms of the GPU's own work each``: the engine's decode
    passes per round (a verify step each, speculating) and the GPU work (every phase but the
    host-paced ones) per pass, over the measured rounds that counted both (empty: none did).
    A round whose requests arrived late runs more steps, with fewer requests in each; the work
    per step does not move with that."""
    steps, work = [], []
    for r in rounds:
        decode = decode_passes(r)
        done = gpu_work_s(r.engine.get("phase_s") or {})
        if r.ok and not r.warmup and decode and done:
            steps.append(decode)
            work.append(done / decode)
    if not steps:
        return ""
    each = sum(work) / len(work) * 1000
    timed = "timed " if untimed else ""
    return (
        f"; {sum(steps) / len(steps):.0f} decode steps a round, {each:.2f} ms of {timed}GPU work "
        "each"
    )


def _ratio(v: Mapping[str, Any]) -> str:
    if v.get("ci_low") is None or v.get("ci_high") is None:
        return f"{v.get('ratio', 0):.3f}"
    return f"{v['ratio']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"


def verdict_rows(judgement: Mapping[str, Any]) -> list[list[str]]:
    """One row per judged level of a judgement's load part (``Judgement.to_dict()``)."""
    load = judgement.get("load") or {}
    rows = []
    for clients, lv in sorted((load.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
        v = lv.get("verdict") or {}
        if not v:
            continue
        p_raw = min(v["p_regress"], v["p_improve"])
        p_adj = "-" if v.get("p_adjusted") is None else f"{v['p_adjusted']:.3g}"
        change = (lv.get("accept") or {}).get("change")
        rows.append([
            str(judgement.get("config")), str(clients),
            str(v["outcome"]) + (" (provisional)" if v.get("provisional") else ""),
            _ratio(v), f"{p_raw:.3g} / {p_adj}", f"{v['mde']:.1%} ({v['delta']:.1%})",
            "-" if change is None else f"{change:+.1%}", str(lv.get("cause") or "-"),
            _work_cell(lv.get("work")),
        ])  # fmt: skip
    return rows


def _work_cell(work: Mapping[str, Any] | None) -> str:
    """The level's GPU-work verdict: ``REGRESSED 0.840x (MDE 0.4%)``, ``-`` where not judged."""
    if not work:
        return "-"
    tag = str(work["outcome"]) + (" (provisional)" if work.get("provisional") else "")
    return f"{tag} {work['ratio']:.3f}x (MDE {work['mde']:.1%})"


def curve_reference(load: Mapping[str, Any]) -> str:
    """What a config's speedup curve is over: its reference config by name (a plain config, or
    a speculative one for a comparison such as a tree against a chain)."""
    for key in ("crossover", "baseline_crossover"):
        found = load.get(key)
        if isinstance(found, Mapping) and found.get("reference"):
            return str(found["reference"])
    return "the plain config"


def crossover_lines(judgement: Mapping[str, Any]) -> list[str]:
    """Where the config's speedup curve falls to 1, tonight and in the stored baselines."""
    load = judgement.get("load") or {}
    name = judgement.get("config")
    out = []
    for key, when in (("crossover", "tonight"), ("baseline_crossover", "stored baselines")):
        found = load.get(key)
        if found:
            out.append(f"{name}: crossover ({when}): {found['text']}")
    return out


def mermaid_chart(title: str, y_label: str, curves: Mapping[str, Sequence[float | None]],
                  levels: Sequence[int]) -> list[str]:  # fmt: skip
    """A Mermaid xy chart (GitHub renders it in Markdown) of one line per curve over
    ``levels``; a missing point repeats none (the line is left out when any is missing)."""
    lines = {k: v for k, v in curves.items() if v and all(x is not None for x in v)}
    if not lines or not levels:
        return []
    values = [float(x) for v in lines.values() for x in v if x is not None]
    top = max(values) * 1.1
    out = ["```mermaid", "xychart-beta", f'    title "{title}"',
           f"    x-axis \"clients\" [{', '.join(str(c) for c in levels)}]",
           f'    y-axis "{y_label}" 0 --> {top:.3g}']  # fmt: skip
    out += [f"    line [{', '.join(f'{float(x):.4g}' for x in v if x is not None)}]"
            for v in lines.values()]  # fmt: skip
    out.append("```")
    legend = ", ".join(f"line {i + 1}: {name}" for i, name in enumerate(lines))
    return [*out, f"_{legend}_"]


def markdown_section(results: Mapping[str, Any]) -> list[str]:
    """The Markdown report's load section: per config its levels, the level verdicts, the
    crossovers, and the throughput and speedup curves as charts (empty without load levels)."""
    from pytest_specdec.report.markdown import code, md, md_table

    configs = [c for c in results.get("configs", []) if levels_of(c)]
    if not configs:
        return []
    out = ["### Load levels", "",
           "Closed-loop clients, each covering the workload once per round; per level the "
           "geometric mean of the rounds' aggregate output tok/s ± its 95% CI (as a share), "
           "decode tok/s (1 / TPOT) at the median and the slow 99th percentile, TTFT, accept "
           "length from the engine's counters, and what the engine did (`queued`: requests "
           "waited; `no graph`: decode batches outside CUDA graphs; `eager prefill`: prefill "
           "batches outside them, of all; `long GC`: the engine's long garbage collections, "
           "by its log).", ""]  # fmt: skip
    for c in configs:
        name = str(c["name"])
        out += [f"**{code(name)}** — {md(limits_line(name, c).split(': ', 1)[1])}", ""]
        out += [md_table(LEVEL_HEADER, level_rows(c)), ""]
        notes = [f"- {md(n)}" for n in level_notes(name, c)]
        out += [*notes, ""] if notes else []
    verdicts = [j for j in results.get("verdicts") or [] if j.get("load")]
    rows = [row for j in verdicts for row in verdict_rows(j)]
    if rows:
        out += ["", "#### Level verdicts (Holm across every level of the run)", "",
                md_table(VERDICT_HEADER, [[code(r[0]), *r[1:]] for r in rows], "lrlrrrrll"),
                ""]  # fmt: skip
    out += [f"- {md(line)}" for j in verdicts for line in crossover_lines(j)]
    out += [f"- {code(str(j['config']))}: {md(note)}" for j in verdicts
            for note in (j.get("load") or {}).get("notes") or []]  # fmt: skip
    levels = sorted({lv for c in configs for lv in levels_of(c)})
    curves = {str(c["name"]): _curve(c, levels) for c in configs}
    out += ["", *mermaid_chart("Aggregate output tok/s", "tok/s", curves, levels)]
    speedups = {str(j["config"]): _speedups(j, levels) for j in verdicts}
    over = sorted({curve_reference(j["load"]) for j in verdicts if j["load"].get("crossover")})
    title = f"Speedup over {over[0]}" if len(over) == 1 else "Speedup over each reference"
    title = title if over else "Speedup over the plain config"
    out += ["", *mermaid_chart(title, "x", speedups, levels)]
    return [*out, ""]


def _curve(config: Mapping[str, Any], levels: Sequence[int]) -> list[float | None]:
    found = {lv.clients: lv.output_tok_per_s for lv in level_summaries(config)}
    return [found.get(c) for c in levels]


def _speedups(judgement: Mapping[str, Any], levels: Sequence[int]) -> list[float | None]:
    """The speedup curve of a judgement's load part (tonight's crossover points)."""
    points = ((judgement.get("load") or {}).get("crossover") or {}).get("points") or []
    found = {int(p["clients"]): float(p["ratio"]) for p in points}
    return [found.get(c) for c in levels]
