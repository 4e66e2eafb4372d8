"""The start set of an SGLang release: what its server imports, found on a CPU. A throwaway
venv (CPU torch, sglang --no-deps) imports the server's modules with a shim that makes torch
report an H200 (9.0; ``probe_code``); a missing module is mapped to its distribution (the
wheel's RECORD: ``wheels``), installed, and the loop goes on; a module present but not
importable on a CPU is stubbed. Last: AT_BOOT, and the closure over the plan's dependency
edges, restricted to what the runner lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from specdec_lab.installs.probe_code import CHILD, SHIM
from specdec_lab.installs.shared import Entry, ProbeError, canon, log, pip_env
from specdec_lab.installs.wheels import ModuleIndex

# The server's modules; a worker missing here is tried with the "_v2" suffix of SGLang 0.5.x.
TARGETS = [f"sglang.{m}" for m in (
    "launch_server", "srt.entrypoints.http_server", "srt.managers.scheduler",
    "srt.managers.tokenizer_manager", "srt.managers.detokenizer_manager",
    "srt.model_executor.model_runner", "srt.models.llama", "srt.models.llama_eagle3",
    "srt.models.dflash", "srt.layers.attention.flashattention_backend",
    "srt.layers.attention.triton_backend", "srt.layers.attention.flashinfer_backend",
    "srt.speculative.ngram_worker", "srt.speculative.standalone_worker",
    "srt.speculative.eagle_worker", "srt.speculative.dflash_worker",
    # the default grammar backend, imported as the scheduler starts: a fork whose other modules
    # do not import xgrammar failed its H200 boot there
    "srt.constrained.xgrammar_backend")]  # fmt: skip
# Imported in a function as the server boots on a GPU (CUDA-only): seen failing H200 boots.
AT_BOOT = {"sgl-deep-gemm": "import deep_gemm: sglang.srt.layers.attention.dsa_backend, from "
           "eagle_worker_v2._capture_cuda_graphs (STANDALONE/EAGLE3 boot on an H200)"}  # fmt: skip
MAX_ROUNDS = 80


def run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise ProbeError(f"{' '.join(cmd[:8])} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def make_venv(python: str, root: Path, torch_req: str, sglang_req: str) -> Path:
    """The throwaway venv: a CPU torch (the machine's pip configuration), SGLang alone, the shim."""
    run([python, "-m", "venv", str(root)])
    vpy = root / "bin" / "python"
    run([str(vpy), "-m", "pip", "install", "-q", torch_req], env=pip_env(False))
    run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", sglang_req], env=pip_env(False))
    (root / "shim").mkdir()
    (root / "shim" / "sitecustomize.py").write_text(SHIM)
    (root / "child.py").write_text(CHILD)
    return vpy


def existing_targets(vpy: Path) -> list[str]:
    """TARGETS that this SGLang has (a worker may be called ``<name>_v2``)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site, found = Path(run([str(vpy), "-c", code]).strip()), []
    for name in TARGETS:
        there = [n for n in (name, f"{name}_v2") if (site / f"{n.replace('.', '/')}.py").is_file()]
        found += there[:1]
        if not there:
            log(f"  {name}: not in this SGLang, skipped")
    return found


def import_round(vpy: Path, targets: list[str], stubs: set[str]) -> list[Entry]:
    """Import every target in one fresh interpreter; the failures, one per target."""
    root = vpy.parent.parent
    (out := root / "round.json").unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(root / "shim"), "SGLANG_PROBE_STUBS": ",".join(stubs)}
    cmd = [str(vpy), str(root / "child.py"), str(out), *targets]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if not out.is_file():
        raise ProbeError(f"the import child died (exit {done.returncode}):\n{done.stderr[-3000:]}")
    failures: list[Entry] = json.loads(out.read_text())
    return failures


def note(found: dict[str, Entry], entry: Entry, how: str, why: str) -> None:
    found.setdefault(canon(entry["name"]), {"how": how, "why": why})


def settle(
    failures: list[Entry], index: ModuleIndex, found: dict[str, Entry], stubs: set[str]
) -> list[str]:
    """Record what this round's failures demand; the requirements to install next."""
    install: list[str] = []
    for r in failures:
        why, dist, module = f"{r['target']} ({r['where']})", r.get("missing_dist"), ""
        if dist:
            entry = next((e for e in index.entries if canon(e["name"]) == canon(dist)), None)
            what = f"metadata of {dist}"
        elif (module := r.get("missing") or r.get("broken") or "") not in stubs | {"", "sglang"}:
            entry, what = index.provider(module), f"import {module}"
        else:
            continue
        if entry is None:
            found[f"?{dist or module}"] = {"how": "unresolved", "why": f"{what}: {why}"}
            stubs.update({module} - {""})
        elif r.get("broken"):
            note(found, entry, "present, not importable on a CPU", f"{r['error'][:160]}: {why}")
            stubs.add(module)
        else:
            note(found, entry, "imported", f"{what}: {why}")
            install.append(f"{entry['name']}=={entry['version']}")
    return sorted(set(install))


def import_loop(vpy: Path, targets: list[str], index: ModuleIndex) -> Entry:
    found: dict[str, Entry] = {"sglang": {"how": "the server itself", "why": "sglang"}}
    stubs: set[str] = set()
    for n in range(1, MAX_ROUNDS + 1):
        failures = import_round(vpy, targets, stubs)
        before = (len(found), len(stubs))
        install = settle(failures, index, found, stubs)
        log(f"round {n}: {len(targets) - len(failures)}/{len(targets)} import; install {install}")
        if install:
            run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", *install], env=pip_env(False))
        elif (len(found), len(stubs)) == before:
            blocked = {r["target"]: r["error"] for r in failures}
            return {"found": found, "stubs": sorted(stubs), "blocked": blocked, "rounds": n}
    raise ProbeError(f"the imports did not settle in {MAX_ROUNDS} rounds")


def close_over_deps(found: dict[str, Entry], plan: dict[str, Entry]) -> list[str]:
    """Add the start set's dependencies that the runner lacks (not SGLang's own: those are what
    the start set prunes); returns the torch/CUDA ones the runner lacks."""
    queue, protected = [n for n in found if n in plan and n != "sglang"], set()
    while queue:
        parent = queue.pop()
        for dep in plan[parent].get("requires", []):
            if (entry := plan.get(dep)) is None or dep in found or entry["status"] == "runner":
                continue
            if entry["status"] == "protected":
                protected.add(f"{dep} (required by {parent})")
                continue
            note(found, entry, "dependency", f"required by {parent}")
            queue.append(dep)
    return sorted(protected)  # the runner's own version of each is used


def start_set(plan: Entry, result: Entry, versions: str) -> Entry:
    """The start-set document (scripts/sglang-start-set-<V>.json)."""
    dists = {canon(e["name"]): e for e in plan["distributions"]}
    for name in (n for n in AT_BOOT if canon(n) in dists):
        note(result["found"], dists[canon(name)], "imported at boot", AT_BOOT[name])
    protected = close_over_deps(result["found"], dists)
    rows = [{"name": dists.get(n, {}).get("name", n), "version": dists.get(n, {}).get("version"),
             "status": dists.get(n, {}).get("status", "unresolved"), **info}
            for n, info in sorted(result["found"].items())]  # fmt: skip
    count = {s: sum(r["status"] == s for r in rows) for s in ("runner", "download", "protected")}
    fetch = [e["name"] for n, e in dists.items() if e["status"] == "download"]
    left_out = sorted(name for name in fetch if canon(name) not in result["found"])
    python, torch = versions.split()
    return {"sglang": plan["sglang"], "method": "CPU imports, CUDA shim, dependency closure",
            "probed_with": {"python": python, "torch": torch, "device": "NVIDIA H200, (9, 0)"},
            "targets": result["targets"], "stubbed": result["stubs"], "blocked": result["blocked"],
            "summary": {"distributions": len(rows), **count}, "distributions": rows,
            "protected_not_fetched": protected, "left_out": left_out}  # fmt: skip


def probe(plan: Entry, python: str, torch_req: str, cache: Path, keep: bool) -> Entry:
    """The whole probe for the plan's SGLang; returns the start-set document."""
    row = next(e for e in plan["distributions"] if canon(e["name"]) == "sglang")
    wheel = (plan.get("release") or {}).get("wheel")  # a fork's wheel, built here
    sglang = wheel or f"sglang=={row['version']}"
    root = Path(tempfile.mkdtemp(prefix="sglang-probe-", dir=cache))
    try:
        log(f"venv {root} ({python}): {torch_req}, {sglang} --no-deps")
        vpy = make_venv(python, root / "venv", torch_req, sglang)
        targets = existing_targets(vpy)
        result = import_loop(vpy, targets, ModuleIndex(plan["distributions"], cache))
        code = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
        return start_set(plan, {**result, "targets": targets}, run([str(vpy), "-c", code]))
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
