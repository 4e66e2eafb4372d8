"""The plan: what SGLang needs on a runner, resolved by pip's resolver for the runner's Python
and platform and held to the runner's freeze (a pin that conflicts is dropped, never a
torch/CUDA one that something installable rejects), each distribution marked runner (has it),
protected (the runner's torch/CUDA stack: never fetched) or download, and in the start set or
not.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from specdec_lab.installs import shared
from specdec_lab.installs.shared import (
    CheckFailed,
    Entry,
    ProbeError,
    UsageError,
    canon,
    log,
    pip_report,
    sha256,
    tag_args,
)

DEFAULT_SGLANG = "0.5.17"
PROTECTED = {"torch", "torchvision", "torchaudio", "triton"}
MAX_RETRIES = 40


PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
USER_REQUESTED = re.compile(rf"The user requested \(constraint\) ({NAME})")
NOT_FOUND = re.compile(rf"No matching distribution found for ({NAME})")
DEPENDS = re.compile(r"^\s*(\S+ \S+) depends on (.+?)\s*$", re.M)


def is_protected(name: str) -> bool:
    """The runner's torch/CUDA stack: never replaced, never downloaded."""
    name = canon(name)
    return name in PROTECTED or name.startswith(("nvidia-", "cuda-"))


def freeze_line(line: str, where: str) -> tuple[str, str | None]:
    """(name, version) of ``name==version`` or ``name @ URL`` (version from the file name)."""
    try:
        req = Requirement(line)
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if req.url:
            file = urllib.parse.unquote(req.url.rsplit("/", 1)[-1])
            parse = parse_wheel_filename if file.endswith(".whl") else parse_sdist_filename
            return req.name, str(parse(file)[1])
        if len(req.specifier) == 1 and len(pins) == 1:
            return req.name, str(Version(pins[0]))
    except (InvalidRequirement, InvalidVersion):
        pass
    except ValueError:  # a URL whose file name tells no version
        return req.name, None
    raise UsageError(f"{where}: cannot read {line!r}: expected name==version (pip freeze)")


def parse_freeze(text: str, source: str) -> dict[str, str | None]:
    """Canonical name → version (None where a ``name @ URL`` line does not say)."""
    runner: dict[str, str | None] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if (line := raw.strip()) and not line.startswith(("#", "-")):
            name, version = freeze_line(line, f"{source}:{number}")
            runner[canon(name)] = version
    return runner


def load_runner(path: Path) -> dict[str, str | None]:
    if not path.is_file():
        raise UsageError(f"runner freeze {path} not found: on the runner run `python3 -m pip list "
                         "--format freeze > runner-freeze.txt` and pass that file")  # fmt: skip
    runner = parse_freeze(path.read_text(encoding="utf-8"), str(path))
    if not runner.get("torch"):
        raise UsageError(f"{path} has no torch==VERSION line: pass the freeze of the python that "
                         "will run SGLang (it must have torch)")  # fmt: skip
    return runner


def target_env(python_version: str, platforms: list[str]) -> dict[str, str]:
    """PEP 508 marker environment of the runner."""
    full = python_version if python_version.count(".") == 2 else f"{python_version}.0"
    machine = "aarch64" if any(p.endswith("aarch64") for p in platforms) else "x86_64"
    return {"python_version": full.rsplit(".", 1)[0], "python_full_version": full,
            "implementation_version": full, "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": machine}  # fmt: skip


def deps(dist: list[str], env: dict[str, str], extras: Iterable[str] = ()) -> list[Requirement]:
    """The Requires-Dist entries that apply on the runner (with the requested extras)."""
    reqs = [Requirement(text) for text in dist]
    envs = [{**env, "extra": extra} for extra in ["", *extras]]
    return [r for r in reqs if r.marker is None or any(r.marker.evaluate(e) for e in envs)]


def choose_release(candidates: Iterable[tuple[str, SpecifierSet | None]], torch: str) -> Entry:
    """The first (newest) release whose torch pin fits the runner's torch; the rejected ones."""
    rejected: list[str] = []
    for version, pin in candidates:
        if pin is not None and pin.contains(torch, prereleases=True):
            return {"chosen": version, "rejected": rejected}
        rejected.append(f"{version} pins torch{pin}" if pin else f"{version} requires no torch")
    raise UsageError(f"no SGLang release fits the runner's torch {torch} ({rejected}): change "
                     "the runner's torch or pass --sglang VERSION")  # fmt: skip


def pick_release(wanted: str, torch: str, opts: argparse.Namespace, env: dict[str, str]) -> Entry:
    """``wanted`` if the index has it, or with auto the newest release whose torch pin fits
    (releases listed and read by pip, for the runner's python and platform)."""
    tags = tag_args(opts.python_version, opts.platforms)
    done = shared.pip(opts.pip_python, ["index", "versions", "sglang", *tags], opts.index_url)
    if not (listed := re.search(r"Available versions: (.*)", done.stdout)):
        raise UsageError(f"pip lists no SGLang release ({done.stderr.strip()[-300:]}): check "
                         "--index-url and the network")  # fmt: skip
    known = listed.group(1).split(", ")
    if wanted != "auto" and wanted not in known:
        raise UsageError(f"unknown SGLang version {wanted!r} (newest: {', '.join(known[:5])}): "
                         "pass one of those or --sglang auto")  # fmt: skip
    if wanted != "auto":
        return {"chosen": wanted, "rejected": []}  # a torch conflict shows in the resolution

    def pin(version: str) -> SpecifierSet | None:
        args = [*tags, "--no-deps", f"sglang=={version}"]
        meta = pip_report(opts.pip_python, args, opts.index_url)["install"][0]["metadata"]
        reqs = deps(meta.get("requires_dist") or [], env)
        return next((r.specifier for r in reqs if canon(r.name) == "torch"), None)

    return choose_release(((v, pin(v)) for v in known), torch)


def accepts(wanted: str, version: str) -> bool:
    """Whether pip's ``X<14 and >=13.0.3; marker`` text accepts ``version`` of X."""
    try:
        return Requirement(wanted.split(";")[0].replace(" and ", ",")).specifier.contains(version)
    except InvalidRequirement:
        return False


def runner_conflicts(output: str, constraints: dict[str, str]) -> list[Entry]:
    """The runner pins in pip's conflict text, with the wants that reject them (``blocking``:
    not counting torch/CUDA packages the runner lacks, which are never installed)."""
    names = {canon(m) for m in USER_REQUESTED.findall(output)}
    names |= {canon(m) for m in NOT_FOUND.findall(output)}
    pairs = set()
    for who, what in DEPENDS.findall(output):
        dep = canon(re.split(r"[^A-Za-z0-9._-]", what, maxsplit=1)[0])
        pairs.add((dep, who.split("[")[0].split()[0], f"{who} depends on {what}", what))
    found = []
    for name in sorted(names & set(constraints)):
        wanted = sorted(pair[1:] for pair in pairs if pair[0] == name)
        blocking = [text for who, text, what in wanted if not accepts(what, constraints[name])
                    and not (is_protected(who) and canon(who) not in constraints)]  # fmt: skip
        found.append({"name": name, "runner": constraints[name], "blocking": blocking,
                      "wanted": [text for _, text, _ in wanted]})  # fmt: skip
    return found


def resolve(sglang: str, runner: dict[str, str | None], opts: argparse.Namespace) -> Entry:
    """pip's report for ``sglang`` (a requirement: ``sglang==V``, or ``sglang @ file:…`` for a
    fork's wheel) on the runner, held to its versions, minus those that conflict."""
    constraints = {n: Version(v).public for n, v in runner.items() if v}
    dropped: list[Entry] = []
    with tempfile.TemporaryDirectory(prefix="sglang-resolve-") as tmp:
        tags, cfile = tag_args(opts.python_version, opts.platforms), Path(tmp, "c.txt")
        for attempt in range(1, MAX_RETRIES + 1):
            cfile.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
            started = time.monotonic()
            try:
                args = [*tags, "-c", str(cfile), sglang]
                return {
                    "report": pip_report(opts.pip_python, args, opts.index_url),
                    "dropped": dropped,
                }
            except ProbeError as failed:
                output = str(failed)
            log(f"  pip resolve #{attempt}: no solution ({time.monotonic() - started:.0f} s)")
            if not (conflicts := runner_conflicts(output, constraints)):
                raise CheckFailed(f"pip cannot resolve {sglang}:\n{output[-3000:]}")
            dropped += [drop(conflict, constraints, sglang) for conflict in conflicts]
    raise CheckFailed(f"{sglang} did not resolve in {MAX_RETRIES} attempts")


def drop(conflict: Entry, constraints: dict[str, str], sglang: str) -> Entry:
    """Drop a runner pin that conflicts; a torch/CUDA one only where nothing that could be
    installed rejects the runner's version (the runner then keeps its own)."""
    name, kept = conflict["name"], is_protected(conflict["name"])
    if kept and (conflict["blocking"] or not conflict["wanted"]):
        wanted = "; ".join(conflict["blocking"]) or "a version the index lacks"
        raise UsageError(f"{sglang} conflicts with the runner's {name} {conflict['runner']} "
                         f"({wanted}): {name} is the runner's torch/CUDA stack, never replaced: "
                         "pass --sglang auto for the newest release that fits")  # fmt: skip
    what = "relaxed for pip, the runner keeps it" if kept else "dropped"
    log(f"    {what}: {name}=={conflict['runner']}: {conflict['wanted'][:3]}")
    del constraints[name]
    return {**conflict, "runner_keeps": kept}


def plan_rows(report: Entry, runner: dict[str, str | None], env: dict[str, str]) -> list[Entry]:
    """One row per resolved distribution: runner (has it), protected (never fetched), download."""
    rows = []
    for item in report["install"]:
        meta, url = item["metadata"], item["download_info"]["url"]
        have = runner.get(canon(meta["name"]))
        same = have is not None and Version(have).public == Version(meta["version"]).public
        status = "runner" if same else "protected" if is_protected(meta["name"]) else "download"
        sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if local := local_file(url):  # a fork's wheel, built here: its own digest
            sha = sha256(local)
        extras, dist = item.get("requested_extras") or [], meta.get("requires_dist") or []
        needs = sorted({canon(r.name) for r in deps(dist, env, extras)})
        rows.append({"name": meta["name"], "version": meta["version"], "status": status,
                     "runner": have, "filename": urllib.parse.unquote(url.rsplit("/", 1)[-1]),
                     "url": url, "sha256": sha, "requires": needs})  # fmt: skip
    return sorted(rows, key=lambda r: canon(r["name"]))


def local_file(url: str) -> Path | None:
    """The path of a ``file:`` URL (a wheel built here), None for an index URL."""
    parsed = urllib.parse.urlparse(url)
    return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


def wheel_version(wheel: Path) -> str:
    """The version in an SGLang wheel's file name (``sglang-V-py3-none-any.whl``)."""
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except ValueError:
        name, version = None, None
    if name != "sglang" or version is None:
        raise UsageError(f"--sglang-wheel {wheel}: not an SGLang wheel (sglang-VERSION-….whl); "
                         "build one with scripts/build-sglang-fork-wheel")  # fmt: skip
    return str(version)


def mark_start_set(plan: Entry, start: Entry | None, source: str | None) -> None:
    """Mark each row of the plan as in the start set or not (None: no start set known)."""
    names = {canon(d["name"]) for d in (start or {}).get("distributions", [])}
    rows, plan["start_set"] = plan["distributions"], source
    for row in rows:
        row["start_set"] = canon(row["name"]) in names if start else None
    summary = {s: sum(r["status"] == s for r in rows) for s in ("runner", "protected", "download")}
    fetched = sum(r["status"] == "download" and bool(r["start_set"]) for r in rows)
    plan["summary"] = {"resolved": len(rows), **summary, "start_set_downloads": fetched}
