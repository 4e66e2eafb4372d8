"""Check a config's engine flags against the installed engine before any boot.

* SGLang: its real argument parser (``ServerArgs.add_cli_args``), run in the interpreter that
  has SGLang (its answer kept while SGLang's version and the command line stay the same:
  engines/scripts.py); algorithm names are checked separately, since the parser accepts any
  string.
* llama.cpp and vLLM: the flags their ``--help`` lists.

Every unknown flag is named with the closest valid one. Besides the flags' validity, a config
known to measure badly gets a *warning* (``Finding.warning``), which never blocks a boot:
``sglang_advice``; and so do SGLang settings that measure the load levels of a run badly:
``load_prefill_advice``.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_specdec.engines.scripts import ScriptFailed, run_script_cached

_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")

# Runs inside SGLang's interpreter: prints {"unknown": [...], "error": ..., "algorithms": [...]}.
_SGLANG_PROBE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)

argv = json.loads(sys.argv[1])
parser = Parser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
flags = sorted(parser._option_string_actions)
out = {"unknown": [], "error": None, "algorithms": None, "flags": flags}
try:
    _, out["unknown"] = parser.parse_known_args(argv)
except ValueError as exc:
    out["error"] = str(exc)
try:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    out["algorithms"] = sorted(a.name for a in SpeculativeAlgorithm if a.name != "NONE")
except Exception:
    pass
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Finding:
    flag: str
    problem: str
    suggestion: str | None = None
    warning: bool = False  # the engine accepts it, but the measurement suffers

    def __str__(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"{'warning: ' if self.warning else ''}{self.flag}: {self.problem}{hint}"


def errors(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that make a command line wrong (warnings left out)."""
    return [f for f in findings if not f.warning]


# SGLang speculative algorithms whose draft model is extended by EAGLEWorkerV2's draft-extend
# step, and the attention backends under which SGLang 0.5.17 captures that step in a CUDA graph
# (eagle_worker_v2.py: graph_supported_backend_types); fa3, its default on Hopper, is not one.
EAGLE_FAMILY = {"STANDALONE", "EAGLE", "EAGLE3", "NEXTN"}
DRAFT_EXTEND_GRAPH_BACKENDS = {"triton", "flashinfer", "trtllm_mha", "trtllm_mla", "flashmla"}
DRAFT_BACKEND_FLAG = "--speculative-draft-attention-backend"


def _value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--flag v`` or ``--flag=v``)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def sglang_advice(argv: Sequence[str]) -> list[Finding]:
    """Warnings for SGLang command lines that measure badly (docs/statistics.md, "SGLang:
    where boot-to-boot noise came from"). An EAGLE-family algorithm (STANDALONE, EAGLE,
    EAGLE3) whose draft attention backend is fa3 runs its draft-extend step eagerly, outside a
    CUDA graph; on an H200 that step took 3 to 12 ms per verify step depending on where the
    prompt's KV landed, so decode speed moved 5-16% between placements and boots."""
    algorithm = (_value(argv, "--speculative-algorithm") or "").upper()
    if algorithm not in EAGLE_FAMILY:
        return []
    draft = _value(argv, DRAFT_BACKEND_FLAG) or _value(argv, "--attention-backend")
    if draft is not None and draft in DRAFT_EXTEND_GRAPH_BACKENDS:
        return []
    chosen = f"set to {draft}" if draft else "not set (SGLang 0.5.17 picks fa3 on Hopper GPUs)"
    return [
        Finding(
            DRAFT_BACKEND_FLAG,
            f"{chosen}: the {algorithm} draft-extend step then runs without a CUDA graph, and "
            "its time depends on where each prompt's KV lands (decode speed moved 5-16% "
            "between placements and boots on an H200, docs/statistics.md); add "
            f"{DRAFT_BACKEND_FLAG} triton",
            warning=True,
        )
    ]


# SGLang 0.5.17's prefill CUDA graphs (server_args.py, _parse_cuda_graph_config): these flags all
# set the prefill graph backend (one argparse destination, the last one given wins; None: the
# flag's value); the off-switches count only where none of them is given; the size flags are
# one list (the second a deprecated alias); --cuda-graph-config's JSON wins over every flag.
PREFILL_BACKEND_FLAGS: Mapping[str, str | None] = {
    "--cuda-graph-backend-prefill": None,
    "--disable-piecewise-cuda-graph": "disabled",
    "--enable-breakable-cuda-graph": "breakable",
    "--enforce-piecewise-cuda-graph": "tc_piecewise",
}
PREFILL_OFF_SWITCHES = ("--disable-prefill-cuda-graph", "--disable-cuda-graph")
PREFILL_SIZES_FLAG = "--cuda-graph-bs-prefill"
PREFILL_SIZE_FLAGS = (PREFILL_SIZES_FLAG, "--piecewise-cuda-graph-tokens")
GRAPH_CONFIG_FLAG = "--cuda-graph-config"
# The prefill graph sizes and their largest size as an SGLang build names them: 0.5.17's, then
# those of builds whose prefill graphs are their piecewise graphs (the DDTree fork of June 2026).
PREFILL_SIZE_NAMES = (
    (PREFILL_SIZES_FLAG, "--cuda-graph-max-bs-prefill"),
    ("--piecewise-cuda-graph-tokens", "--piecewise-cuda-graph-max-tokens"),
)


def _last(argv: Sequence[str], flags: Iterable[str]) -> tuple[str, list[str]] | None:
    """The last of ``flags`` given and its values (``--flag a b`` up to the next flag, or
    ``--flag=a``)."""
    names = set(flags)
    found = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name not in names:
            continue
        if eq:
            found = (name, [value])
            continue
        values = []
        for nxt in argv[i + 1 :]:
            if nxt.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", nxt):
                break
            values.append(nxt)
        found = (name, values)
    return found


def _graph_config_prefill(argv: Sequence[str]) -> dict[str, object]:
    """The ``prefill`` table of --cuda-graph-config's JSON (empty where none is readable: the
    parser itself names a bad one)."""
    given = _last(argv, [GRAPH_CONFIG_FLAG])
    try:
        table = json.loads(given[1][0]) if given and given[1] else {}
    except json.JSONDecodeError:
        return {}
    prefill = table.get("prefill") if isinstance(table, dict) else None
    return prefill if isinstance(prefill, dict) else {}


def prefill_graphs_off(argv: Sequence[str]) -> str | None:
    """What in ``argv`` turns SGLang 0.5.17's prefill CUDA graphs off (a flag, a flag and its
    value, or --cuda-graph-config's prefill backend), or None where they stay on."""
    config = _graph_config_prefill(argv)
    chosen = _last(argv, PREFILL_BACKEND_FLAGS)
    if "backend" in config:
        backend, source = str(config["backend"]), f"{GRAPH_CONFIG_FLAG} prefill backend"
    elif chosen is not None:
        flag, values = chosen
        backend = PREFILL_BACKEND_FLAGS[flag] or (values[0] if values else "")
        source = flag if PREFILL_BACKEND_FLAGS[flag] else f"{flag} {backend}"
    else:
        off = [f for f in PREFILL_OFF_SWITCHES if f in argv]
        backend, source = ("disabled", off[-1]) if off else ("", "")
    return source if backend == "disabled" else None


def eager_one_token_prefill(argv: Sequence[str], flags: Iterable[str] | None = None) -> str | None:
    """Why SGLang 0.5.17 runs a one-token prefill outside CUDA graphs under ``argv``, or None
    where it has a graph. Prefill graphs are on by default, at sizes 4, 8, 12, ... new tokens,
    and a graph is replayed only where the new tokens pad to a captured size at most twice as
    large: a one-token prefill has one only where the sizes include 1. ``flags``: the installed
    SGLang's, where known, so that the default sizes are named by its own flag (the DDTree
    fork's piecewise sizes default to the same 4, 8, 12, ...)."""
    config = _graph_config_prefill(argv)
    off = prefill_graphs_off(argv)
    if off is not None:
        return f"{off} turns prefill CUDA graphs off"
    if "bs" in config:
        sizes = [str(s) for s in config["bs"]] if isinstance(config["bs"], list) else []
        named = f"{GRAPH_CONFIG_FLAG} prefill bs [{', '.join(sizes)}]"
    elif (given := _last(argv, PREFILL_SIZE_FLAGS)) is not None:
        sizes, named = given[1], f"{given[0]} {' '.join(given[1])}"
    else:
        names = _size_names(flags)
        sizes_flag = names[0][0] if names else PREFILL_SIZES_FLAG
        whose = "SGLang 0.5.17's" if sizes_flag == PREFILL_SIZES_FLAG else "this SGLang's"
        return (
            f"no {sizes_flag} is given, and {whose} default prefill graph sizes (4, 8, 12, ...) "
            "leave a one-token prefill eager (a graph is replayed only where the new tokens pad "
            "to a captured size at most twice as large)"
        )
    if "1" in sizes:
        return None
    return f"{named} has no size 1, so a one-token prefill runs eagerly"


def _size_names(flags: Iterable[str] | None) -> list[tuple[str, str]]:
    """The prefill graph size flags (sizes, largest) that the SGLang whose parser knows
    ``flags`` takes, 0.5.17's first (all of them where None)."""
    known = None if flags is None else set(flags)
    return [n for n in PREFILL_SIZE_NAMES if known is None or n[0] in known]


def prefill_fix(argv: Sequence[str], flags: Iterable[str] | None = None) -> str:
    """How to give every prefill up to N new tokens a CUDA graph, in the flags of the SGLang
    whose parser knows ``flags`` (0.5.17's where None)."""
    names = _size_names(flags)
    off = prefill_graphs_off(argv)
    drop = f"drop {off} and " if off else ""
    if not names:
        return (
            f"this SGLang's parser names no prefill graph sizes ({PREFILL_SIZE_NAMES[0][0]} or "
            f"{PREFILL_SIZE_NAMES[1][0]}): {drop}judge its load levels knowing that a small "
            "prefill runs eagerly"
        )
    sizes, largest = names[0]
    fix = (
        f"{drop}add {sizes} 1 2 4 ... N with {largest} N at least the largest prefill expected "
        "(the load suite uses 256)"
    )
    if sizes != PREFILL_SIZES_FLAG:
        fix += f" (this SGLang has no {PREFILL_SIZES_FLAG}: its prefill graphs are piecewise)"
        if (_value(argv, "--speculative-algorithm") or "").upper() == "DFLASH":
            fix += (
                "; a DFLASH prefill still runs eagerly there: the DDTree fork captured those "
                "graphs without the hidden states its prefill keeps for the drafter, and "
                'replayed none of 232 prefill batches (docs/gpu-run.md, "An H100: DDTree under '
                'load on the fork")'
            )
    return fix


def load_prefill_advice(
    levels: Sequence[int], argv: Sequence[str], where: str = "the SGLang args",
    flags: Iterable[str] | None = None,
) -> list[Finding]:  # fmt: skip
    """A warning for SGLang args that leave a one-token prefill eager (above) where a load level
    has more than one client: under load every arriving request is prefilled while the others
    wait, and once the radix cache holds the prompts nearly every prefill is a few new tokens,
    most often one. Run eagerly (kernel by kernel from the scheduler's Python loop), its time per
    round moved 2.8-fold between boots on an H200 (suites/specdec-gpu-load.toml; docs/gpu-run.md,
    "An eighth H200" to "A tenth H200"). ``flags``: the installed SGLang's, where known, so that
    the fix names its own flags."""
    if max(levels, default=0) <= 1:
        return []
    flags = None if flags is None else set(flags)
    reason = eager_one_token_prefill(argv, flags)
    if reason is None:
        return []
    names = _size_names(flags)
    return [
        Finding(
            names[0][0] if names else PREFILL_SIZES_FLAG,
            f"concurrency {list(levels)} with {where}: {reason}. Under load every arriving "
            "request's prefill then runs eagerly, and its time moves between boots (its time "
            "per round moved 2.8-fold between boots on an H200: suites/specdec-gpu-load.toml; "
            f'docs/gpu-run.md, "An eighth H200" to "A tenth H200"); {prefill_fix(argv, flags)}',
            warning=True,
        )
    ]


class LintUnavailable(RuntimeError):
    """The engine's own parser or help text could not be read."""


def flags_in_help(text: str) -> set[str]:
    """Every option string a ``--help`` text mentions at the start of an entry."""
    found: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("-"):
            continue
        stripped = re.sub(r",\s+", ", ", stripped)  # "-md,   --spec-draft-model" is one entry
        head = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        found.update(_FLAG.findall(head))
    return found


def closest(flag: str, valid: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(flag, sorted(valid), n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_flags(args: Sequence[str], valid: set[str]) -> list[Finding]:
    """Args that look like flags (``-x``/``--x``, ``--x=v``) and are not in ``valid``."""
    out = []
    for arg in args:
        if not arg.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", arg):
            continue
        flag = arg.split("=", 1)[0]
        if flag not in valid:
            out.append(Finding(flag, "unknown to the installed engine", closest(flag, valid)))
    return out


def help_text(argv: Sequence[str], timeout: float = 60.0) -> str:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LintUnavailable(f"cannot run {' '.join(argv)}: {exc}") from exc
    text = proc.stdout + proc.stderr
    if not flags_in_help(text):
        raise LintUnavailable(f"{' '.join(argv)} printed no option list (exit {proc.returncode})")
    return text


def lint_by_help(args: Sequence[str], help_argv: Sequence[str]) -> list[Finding]:
    return unknown_flags(args, flags_in_help(help_text(help_argv)))


PROBE_PORT = "30000"


def probe_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with its port set to one value: the parser takes any port alike, and the
    cached result of a command line then serves every boot of it (each picks a free port).
    The private YAML that carries the API key (``--config .../sglang-<port>.yaml``, a new
    folder each boot) is left out: it holds the key alone, which no finding depends on."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--port" and i + 1 < len(out):
            out[i + 1] = PROBE_PORT
        elif arg.startswith("--port="):
            out[i] = f"--port={PROBE_PORT}"
    keyed = [i for i, a in enumerate(out[:-1]) if a == "--config" and KEY_YAML.search(out[i + 1])]
    dropped = {k for i in keyed for k in (i, i + 1)}
    return [a for i, a in enumerate(out) if i not in dropped]


KEY_YAML = re.compile(r"(^|/)sglang-\d+\.yaml$")  # what key_yaml_name names, and nothing else


def key_yaml_name(port: int) -> str:
    """The file name of the private YAML that carries one boot's API key to SGLang."""
    return f"sglang-{port}.yaml"


def sglang_probe(python: str, argv: Sequence[str], timeout: float = 120.0) -> dict[str, object]:
    try:
        data: dict[str, object] = run_script_cached(
            python, _SGLANG_PROBE, [json.dumps(probe_argv(argv))], timeout=timeout,
            packages=("sglang",),
        )  # fmt: skip
    except ScriptFailed as exc:
        raise LintUnavailable(f"SGLang's parser failed to load with {python}: {exc}") from exc
    return data


def lint_sglang(python: str, argv: Sequence[str]) -> list[Finding]:
    """Findings for SGLang launch args (without ``python -m sglang.launch_server``)."""
    data = sglang_probe(python, argv)
    flags = {str(f) for f in data.get("flags") or []}  # type: ignore[attr-defined]
    out = []
    for arg in data.get("unknown") or []:  # type: ignore[attr-defined]
        arg = str(arg)
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            out.append(Finding(flag, "unknown to SGLang's argument parser", closest(flag, flags)))
    if data.get("error"):
        out.append(
            Finding("(parse)", f"SGLang's parser rejected the command line: {data['error']}")
        )
    algorithms = data.get("algorithms")
    name = _value(argv, "--speculative-algorithm")
    if name and isinstance(algorithms, list):
        known = {str(a) for a in algorithms} | {"NEXTN"}
        if name.upper() not in known:
            out.append(
                Finding(
                    f"--speculative-algorithm {name}",
                    f"not an algorithm of the installed SGLang ({', '.join(sorted(known))})",
                    closest(name.upper(), known),
                )
            )
    return out + sglang_advice(argv)


def lint_sglang_load(python: str, argv: Sequence[str], levels: Sequence[int]) -> list[Finding]:
    """:func:`load_prefill_advice` for SGLang launch args, its fix in the flags of the SGLang
    whose parser ``python`` runs (the probe's answer is cached: no second parse)."""
    if max(levels, default=0) <= 1:
        return []
    flags = sglang_probe(python, argv).get("flags")
    known = [str(f) for f in flags] if isinstance(flags, list) else None
    return load_prefill_advice(levels, argv, flags=known)
