"""Where a load level's time went, boot by boot: the GPU seconds of each forward phase per round
(SGLang's device timer, ``engine.phase_s`` of a round), the time of the round in which the GPU ran
no forward at all (its wall time less those seconds: the host's part), the GPU's busy share
(NVML), the host's stolen share, the CPU the engine's busiest thread was on, the busiest thread
of another engine process (SGLang's HTTP front) and of the load client (``engine.host``), beside
the round's throughput.

    python bench/load_phases.py RESULTS.json[.gz] [RERUN.json[.gz] ...] [--clients 4 --clients 16]

Per config and level, one row per boot (server session): the mean over its measured rounds.
Then, over every measured round of the level, each phase's spread between boots (the largest
boot mean over the smallest) and its correlation with the round's throughput: the phase whose
time moves with the throughput while the others stay put is where the boots differ. Last, the
boots' spread and the MDE a night of M boots (``--nightly``, default 1) would have against K
stored boots (``--stored``), and the rounds in which the engine answered a metrics read late
(its HTTP server's process stood still), with the spread the boots would have without them;
and the rounds in which the hypervisor stole more than ``--steal-over`` of the machine's CPU
time, with the spread without those; and which machine (GPU) ran which boots, with the spread
within machines where one ran several.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_specdec.core.results import load_results
from pytest_specdec.measure.host import other_threads, shared_cpus
from pytest_specdec.measure.levels import (
    RoundResult,
    decode_passes,
    levels_of,
    no_forward_s,
    phase_means,
    rounds_of,
)
from pytest_specdec.report.load import draft_untimed
from pytest_specdec.verdict.machines import machine_of
from pytest_specdec.verdict.planning import history_mde
from pytest_specdec.verdict.stats import SessionSummary
from pytest_specdec.verdict.work import HOST_PACED_PHASES, gpu_work_s


def measured(config: dict[str, Any], clients: int) -> list[RoundResult]:
    """The level's rounds that count: not warm-up, no failure, throughput known."""
    return [r for r in rounds_of(config, clients) if r.ok and r.output_tok_per_s]


def util(r: RoundResult) -> float | None:
    devices = (r.gpu or {}).get("devices") or []
    value = devices[0].get("util_gpu_median_pct") if devices else None
    return None if value is None else float(value)


def phases_of(r: RoundResult) -> dict[str, float]:
    return {k: float(v) for k, v in (r.engine.get("phase_s") or {}).items()}


def mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def placed(host: Sequence[dict[str, Any]]) -> str:
    """The CPUs the busiest engine thread (SGLang's scheduler loop) was on at the end of the
    boot's rounds, ``*`` where busy threads shared a CPU in some round; ``-``: not recorded."""
    on = sorted({int(h["busiest"]["on_cpu"]) for h in host
                 if (h.get("busiest") or {}).get("on_cpu") is not None})  # fmt: skip
    crowded = any(shared_cpus(h.get("busy_threads") or []) for h in host)
    return (",".join(map(str, on)) + ("*" if crowded else "")) if on else "-"


def other_thread(host: Sequence[dict[str, Any]]) -> float | None:
    """The most CPUs' worth any thread of an engine process other than each round's busiest
    ran in a round of the boot (SGLang's HTTP front and tokenizer manager); None: not read."""
    ran = [cpus for h in host for cpus in other_threads(h).values()]
    return max(ran) if ran else None


def client_thread(host: Sequence[dict[str, Any]]) -> float | None:
    """The most CPUs' worth the load client's busiest thread ran in a round of the boot."""
    ran = [float(h["client"]["thread"]) for h in host if h.get("client")]
    return max(ran) if ran else None


def boot_rows(rounds: Sequence[RoundResult], names: Sequence[str]) -> list[str]:
    """One Markdown row per boot: throughput, GPU busy, steal, the busiest other engine thread
    and the client's, phase seconds per round."""
    rows = []
    for session in sorted({r.session for r in rounds}):
        mine = [r for r in rounds if r.session == session]
        host = [r.engine.get("host") or {} for r in mine]
        tput = mean([float(r.output_tok_per_s or 0) for r in mine])
        cells = [str(session), str(len(mine)), _cell(tput, ".0f"),
                 _cell(mean([util(r) for r in mine]), ".0f"),
                 _cell(mean([h.get("steal") for h in host]), ".2%"), placed(host),
                 _cell(other_thread(host), ".2f"), _cell(client_thread(host), ".2f")]  # fmt: skip
        phases = phase_means(mine)
        idle = no_forward_s(mine)
        cells.append(_cell(idle[0] if idle else None, ".3f"))
        cells.append(_cell(mean([decode_passes(r) for r in mine]), ".0f"))
        cells += [_cell(phases.get(n), ".3f") for n in names]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def phase_lines(rounds: Sequence[RoundResult], names: Sequence[str]) -> list[str]:
    """Each phase's spread between boots and its correlation with the rounds' throughput."""
    out = []
    tput = np.array([float(r.output_tok_per_s or 0) for r in rounds])
    sessions = sorted({r.session for r in rounds})
    for name in names:
        timed = [(t, phases_of(r)[name]) for t, r in zip(tput, rounds, strict=True)
                 if name in phases_of(r)]  # fmt: skip
        boots = [phase_means([r for r in rounds if r.session == s]).get(name)
                 for s in sessions]  # fmt: skip
        known = [b for b in boots if b]
        spread = max(known) / min(known) if len(known) > 1 else None
        corr = None
        if len(timed) > 2 and np.std([s for _, s in timed]) > 0:
            corr = float(np.corrcoef([t for t, _ in timed], [s for _, s in timed])[0, 1])
        out.append(f"  {name}: boots' means {' / '.join(_cell(b, '.3f') for b in boots)} s "
                   f"(largest/smallest {_cell(spread, '.2f')}), correlation with tok/s "
                   f"{_cell(corr, '+.2f')} over {len(timed)} rounds")  # fmt: skip
    return out


def per_pass_lines(
    rounds: Sequence[RoundResult], names: Sequence[str], rest: str = "no forward"
) -> list[str]:
    """Per boot, each phase's GPU time and the rest of the round (``rest``: what the table
    calls it) per decode pass (a verify step of every running request, speculating), in ms:
    what a step costs, where."""
    out = []
    for session in sorted({r.session for r in rounds}):
        mine = [r for r in rounds if r.session == session]
        passes = mean([decode_passes(r) for r in mine])
        idle = no_forward_s(mine)
        if not passes or idle is None:
            continue
        phases = phase_means(mine)
        parts = [(n, phases[n]) for n in names if n in phases] + [(rest, idle[0])]
        whole = sum(v for _, v in parts)
        text = ", ".join(f"{n} {v / passes * 1000:.3f}" for n, v in parts)
        out.append(f"  per decode pass, boot {session} (ms): {text}; whole "
                   f"{whole / passes * 1000:.3f}")  # fmt: skip
    return out


def _spread_line(
    label: str, means: Sequence[float], unit: str, fmt: str, stored: Sequence[int], nightly: int
) -> str | None:
    """``  {label} a / b / c {unit}: sd of their logs x%; one boot's MDE against ...`` from the
    boots' log means."""
    if len(means) < 2:
        return None
    sd = statistics.stdev(means)
    mdes = ", ".join(f"{k} stored {history_mde(sd, k, nightly):.1%}" for k in stored)
    boots = " / ".join(format(math.exp(m), fmt) for m in means)
    night = "one boot's" if nightly == 1 else f"{nightly} boots'"
    return f"  {label} {boots} {unit}: sd of their logs {sd:.2%}; {night} MDE against {mdes}"


def boot_means(rounds: Sequence[RoundResult]) -> list[float]:
    """Each boot's level mean of the rounds' throughput, in logs (as a stored session holds it)."""
    return [
        SessionSummary.from_values(
            [float(r.output_tok_per_s or 0) for r in rounds if r.session == s]
        ).mean_log
        for s in sorted({r.session for r in rounds})
    ]


def boot_spread(
    rounds: Sequence[RoundResult], stored: Sequence[int], nightly: int = 1
) -> str | None:
    """The spread of the boots' level means (sd of their logs, as the prediction interval
    reads it) and the MDE a night of ``nightly`` boots would have against that many stored."""
    return _spread_line("boots", boot_means(rounds), "tok/s", ".0f", stored, nightly)


def plan_line(
    rounds: Sequence[RoundResult], stored: Sequence[int], target: float, most: int,
    boot_min: float | None,
) -> str | None:  # fmt: skip
    """The fewest boots a night (up to ``most``) whose throughput MDE against each number of
    stored boots reaches ``target``, at the boots' spread, with what a night of them costs
    (``boot_min``: GPU-minutes a boot, from the runs' records)."""
    means = boot_means(rounds)
    if len(means) < 2:
        return None
    sd = statistics.stdev(means)
    parts = []
    for k in stored:
        m = next((m for m in range(1, most + 1) if history_mde(sd, k, m) <= target), None)
        if m is None:
            parts.append(f"more than {most} boots a night against {k} stored")
            continue
        cost = f", {m * boot_min:.1f} GPU-min" if boot_min else ""
        parts.append(f"{m} boot(s) a night against {k} stored ({history_mde(sd, k, m):.1%}{cost})")
    return f"  throughput MDE {target:.0%} or less: " + "; ".join(parts)


def boot_minutes(docs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each config's GPU-minutes per server session (the median over the runs' sessions: boot,
    warm-up, every level, stop), from the cost each results document records."""
    spent: dict[str, list[float]] = {}
    for doc in docs:
        for cfg in doc["configs"]:
            for cost in (cfg.get("extra") or {}).get("cost") or []:
                if cost.get("total_s") is not None:
                    spent.setdefault(cfg["name"], []).append(float(cost["total_s"]) / 60)
    return {name: statistics.median(v) for name, v in spent.items()}


def work_spread(
    rounds: Sequence[RoundResult], stored: Sequence[int], nightly: int = 1
) -> str | None:
    """The same for the GPU's own work per round (every timed phase but the host-paced ones),
    what a level's GPU-work verdict judges; None without phase times."""
    means = []
    for session in sorted({r.session for r in rounds}):
        work = [w for r in rounds if r.session == session
                if (w := gpu_work_s(r.engine.get("phase_s") or {}))]  # fmt: skip
        if work:
            means.append(statistics.fmean(math.log(w) for w in work))
    but = ", ".join(sorted(HOST_PACED_PHASES))
    return _spread_line(f"GPU work (all phases but {but}) per round:", means, "s", ".3f",
                        stored, nightly)  # fmt: skip


def step_spread(
    rounds: Sequence[RoundResult], stored: Sequence[int], nightly: int = 1
) -> str | None:
    """The boots' spread of the GPU's own work per decode pass: the work per round without
    the occupancy (a round with late arrivals runs more passes, each with fewer requests);
    None where the passes were not counted."""
    means = []
    for session in sorted({r.session for r in rounds}):
        mine = [(gpu_work_s(r.engine.get("phase_s") or {}), decode_passes(r))
                for r in rounds if r.session == session]  # fmt: skip
        each = [w / n for w, n in mine if w and n]
        if each:
            means.append(statistics.fmean(math.log(v) for v in each))
    return _spread_line("GPU work per decode pass:", means, "s", ".5f", stored, nightly)


def gathered(
    docs: Sequence[dict[str, Any]], machines: dict[str, dict[int, str]] | None = None
) -> dict[str, dict[int, list[RoundResult]]]:
    """Each config's measured rounds per level over several results documents of the same
    configs (a run and its reruns), boots numbered on in their order; ``machines``, where
    given, gets each config's boot -> the machine that ran it (``machine_of`` its document)."""
    out: dict[str, dict[int, list[RoundResult]]] = {}
    offsets: dict[str, int] = {}
    for doc in docs:
        machine = machine_of(doc) or "-"
        for cfg in doc["configs"]:
            name, offset, last = cfg["name"], offsets.get(cfg["name"], 0), 0
            for clients in levels_of(cfg):
                rounds = [replace(r, session=r.session + offset) for r in measured(cfg, clients)]
                out.setdefault(name, {}).setdefault(clients, []).extend(rounds)
                last = max([last] + [r.session for r in rounds])
                if machines is not None:
                    machines.setdefault(name, {}).update({r.session: machine for r in rounds})
            offsets[name] = max(offset, last)
    return out


def machine_lines(
    rounds: Sequence[RoundResult], machine: dict[int, str], stored: Sequence[int],
    nightly: int = 1,
) -> list[str]:  # fmt: skip
    """Which machine ran which boots, and, where some machine ran two or more, the boots'
    spread within machines (the sd of their logs pooled over the machines) and the MDE a night
    of ``nightly`` boots would have against that many stored boots of its own machine. Nothing
    for one machine or unknown ones."""
    means = dict(zip(sorted({r.session for r in rounds}), boot_means(rounds), strict=True))
    by: dict[str, list[int]] = {}
    for boot in means:
        by.setdefault(machine.get(boot, "-"), []).append(boot)
    if len(by) < 2 or "-" in by:
        return []
    ran = "; ".join(f"boot(s) {', '.join(map(str, b))} on {m}" for m, b in by.items())
    out = [f"  machines: {len(by)} ({ran})"]
    groups = [[means[b] for b in boots] for boots in by.values() if len(boots) > 1]
    if groups:
        dof = sum(len(g) - 1 for g in groups)
        pooled = math.sqrt(sum(statistics.variance(g) * (len(g) - 1) for g in groups) / dof)
        each = " / ".join(f"{statistics.stdev(g):.2%}" for g in groups)
        mdes = ", ".join(f"{k} stored {history_mde(pooled, k, nightly):.1%}" for k in stored)
        night = "one boot's" if nightly == 1 else f"{nightly} boots'"
        out.append(f"  within machines: sd of the boots' logs {each}, pooled {pooled:.2%}; "
                   f"{night} MDE against its own machine's {mdes}")  # fmt: skip
    return out


def stalled(
    rounds: Sequence[RoundResult], floor_s: float = 0.2, factor: float = 4.0
) -> list[RoundResult]:
    """Rounds in which the engine answered a gauge read late: its longest read took ``factor``
    times the level's median longest read and at least ``floor_s``. SGLang serves /metrics from
    its HTTP server's process, so a late answer means that process stood still (a long garbage
    collection, where its log says so), while requests waited to reach the scheduler."""
    reads = [
        float(r.engine["gauge_read_max_s"]) for r in rounds if r.engine.get("gauge_read_max_s")
    ]
    if not reads:
        return []
    limit = max(floor_s, factor * statistics.median(reads))
    return [r for r in rounds if float(r.engine.get("gauge_read_max_s") or 0.0) >= limit]


def stall_lines(
    rounds: Sequence[RoundResult], stored: Sequence[int], nightly: int = 1
) -> list[str]:
    """Each stalled round beside its boot's other rounds, and the boots' spread without them."""
    late = stalled(rounds)
    out = []
    for r in late:
        others = [float(o.output_tok_per_s or 0) for o in rounds
                  if o.session == r.session and o is not r]  # fmt: skip
        gc = r.engine.get("engine_gc_max_s")
        gc_note = f", the engine's longest GC {float(gc) * 1000:.0f} ms" if gc else ""
        out.append(
            f"  stalled: boot {r.session} round {r.round}: {float(r.output_tok_per_s or 0):.0f} "
            f"tok/s against {statistics.fmean(others):.0f} in the boot's others, a metrics read "
            f"answered after {float(r.engine['gauge_read_max_s']) * 1000:.0f} ms{gc_note}"
        )
    return out + without(rounds, late, "the stalled rounds", stored, nightly)


def without(
    rounds: Sequence[RoundResult], left_out: Sequence[RoundResult], what: str,
    stored: Sequence[int], nightly: int,
) -> list[str]:  # fmt: skip
    """The boots' spread with ``left_out`` rounds removed (nothing when none is)."""
    if not left_out:
        return []
    spread = boot_spread([r for r in rounds if r not in left_out], stored, nightly)
    return [f"  without {what}:" + spread.removeprefix(" ")] if spread else []


def stolen(rounds: Sequence[RoundResult], over: float) -> list[RoundResult]:
    """Rounds in which the hypervisor stole more than ``over`` of the machine's CPU time."""
    return [r for r in rounds if float((r.engine.get("host") or {}).get("steal") or 0.0) > over]


def steal_lines(
    rounds: Sequence[RoundResult], over: float, stored: Sequence[int], nightly: int = 1
) -> list[str]:
    """How many rounds of which boots lost more than ``over`` to the hypervisor, and the boots'
    spread without those rounds: whether the steal the guest sees accounts for the spread."""
    hit = stolen(rounds, over)
    if not hit:
        return []
    boots = sorted({r.session for r in hit})
    head = (f"  stolen over {over:.2%}: {len(hit)} of {len(rounds)} rounds, in boot(s) "
            f"{', '.join(map(str, boots))}")  # fmt: skip
    return [head, *without(rounds, hit, "those rounds", stored, nightly)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+",
                        help="results files of the same configs: a run and its reruns")  # fmt: skip
    parser.add_argument("--clients", type=int, action="append", default=None)
    parser.add_argument(
        "--stored",
        type=int,
        nargs="+",
        default=[5, 10],
        help="stored boots K for the MDE line (default 5 10)",
    )
    options: list[tuple[str, type, float, str]] = [
        ("--nightly", int, 1, "boots a night M for the MDE line (default 1)"),
        ("--target", float, 0.05, "the throughput MDE a night should reach: the fewest boots "
         "a night that reach it against each --stored (default 0.05)"),
        ("--most-boots", int, 6, "boots a night the plan may use (default 6)"),
        ("--steal-over", float, 0.001, "a round whose stolen share of the machine's CPU time "
         "exceeds this is counted, and the boots' spread shown without such rounds (default "
         "0.001: 0.1%%)"),
    ]  # fmt: skip
    for flag, kind, default, text in options:
        parser.add_argument(flag, type=kind, default=kind(default), help=text)
    args = parser.parse_args(argv)
    docs = [load_results(path) for path in args.results]
    minutes = boot_minutes(docs)
    machines: dict[str, dict[int, str]] = {}
    untimed_drafts = {c["name"] for doc in docs for c in doc["configs"]
                      if draft_untimed(c, phase_means(rounds_of(c)))}  # fmt: skip
    for name, levels in gathered(docs, machines).items():
        for clients in args.clients or sorted(levels):
            rounds = levels.get(clients) or []
            if not rounds:
                continue
            names = sorted({k for r in rounds for k in phases_of(r)})
            print(f"\n{name} at {clients} clients")
            # a draft model with no draft phase timed (DFLASH): the rest holds its forward
            rest = "untimed" if name in untimed_drafts else "no forward"
            print("| boot | rounds | out tok/s | GPU busy % | steal | busiest on CPU | "
                  f"other thread CPUs | client CPUs | {rest} s | decode passes | "
                  + " | ".join(f"{n} s" for n in names) + " |")  # fmt: skip
            print("|" + "---:|" * (10 + len(names)))
            print("\n".join(boot_rows(rounds, names)))
            print("\n".join(phase_lines(rounds, names) + per_pass_lines(rounds, names, rest)))
            for spread in (boot_spread(rounds, args.stored, args.nightly),
                           work_spread(rounds, args.stored, args.nightly),
                           step_spread(rounds, args.stored, args.nightly)):  # fmt: skip
                if spread:
                    print(spread)
            for line in machine_lines(rounds, machines.get(name, {}), args.stored, args.nightly):
                print(line)
            plan = plan_line(rounds, args.stored, args.target, args.most_boots,
                             minutes.get(name))  # fmt: skip
            if plan:
                print(plan)
            print("\n".join(stall_lines(rounds, args.stored, args.nightly)))
            print("\n".join(steal_lines(rounds, args.steal_over, args.stored, args.nightly)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
