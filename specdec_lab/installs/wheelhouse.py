"""sglang-wheelhouse: SGLang for an air-gapped GPU runner, from wheels fetched where PyPI is.

resolve (pip's resolver for the runner's Python and platform, held to its freeze), probe (the start
set: installs/probe.py), download (the start-set wheels the runner lacks, hashed, manifest.json),
check (the manifest's files, whole, nothing else), install (on the runner). Torch, torchvision,
torchaudio, triton, CUDA libraries (nvidia-*, cuda-*) are the runner's: never replaced or fetched.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from specdec_lab.installs import probe as sp
from specdec_lab.installs.probe import UsageError, load_json, write_json

Entry = dict[str, Any]
HERE = Path(__file__).resolve().parents[2] / "scripts"  # the committed start sets
DEFAULT_SGLANG = "0.5.17"
PROTECTED = {"torch", "torchvision", "torchaudio", "triton"}
MAX_RETRIES = 40
SMOKE = "sglang,sglang.srt.server_args"
# Every manylinux tag that a runner with glibc 2.35 or newer accepts.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
USER_REQUESTED = re.compile(rf"The user requested \(constraint\) ({NAME})")
NOT_FOUND = re.compile(rf"No matching distribution found for ({NAME})")
DEPENDS = re.compile(r"^\s*(\S+ \S+) depends on (.+?)\s*$", re.M)


class CheckFailed(Exception):
    """A check failed (exit 1)."""


def is_protected(name: str) -> bool:
    """The runner's torch/CUDA stack: never replaced, never downloaded."""
    name = sp.canon(name)
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
            runner[sp.canon(name)] = version
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
    tags = sp.tag_args(opts.python_version, opts.platforms)
    done = sp.pip(opts.pip_python, ["index", "versions", "sglang", *tags], opts.index_url)
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
        meta = sp.pip_report(opts.pip_python, args, opts.index_url)["install"][0]["metadata"]
        reqs = deps(meta.get("requires_dist") or [], env)
        return next((r.specifier for r in reqs if sp.canon(r.name) == "torch"), None)

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
    names = {sp.canon(m) for m in USER_REQUESTED.findall(output)}
    names |= {sp.canon(m) for m in NOT_FOUND.findall(output)}
    pairs = set()
    for who, what in DEPENDS.findall(output):
        dep = sp.canon(re.split(r"[^A-Za-z0-9._-]", what, maxsplit=1)[0])
        pairs.add((dep, who.split("[")[0].split()[0], f"{who} depends on {what}", what))
    found = []
    for name in sorted(names & set(constraints)):
        wanted = sorted(pair[1:] for pair in pairs if pair[0] == name)
        blocking = [text for who, text, what in wanted if not accepts(what, constraints[name])
                    and not (is_protected(who) and sp.canon(who) not in constraints)]  # fmt: skip
        found.append({"name": name, "runner": constraints[name], "blocking": blocking,
                      "wanted": [text for _, text, _ in wanted]})  # fmt: skip
    return found


def resolve(sglang: str, runner: dict[str, str | None], opts: argparse.Namespace) -> Entry:
    """pip's report for ``sglang`` (a requirement: ``sglang==V``, or ``sglang @ file:…`` for a
    fork's wheel) on the runner, held to its versions, minus those that conflict."""
    constraints = {n: Version(v).public for n, v in runner.items() if v}
    dropped: list[Entry] = []
    with tempfile.TemporaryDirectory(prefix="sglang-resolve-") as tmp:
        tags, cfile = sp.tag_args(opts.python_version, opts.platforms), Path(tmp, "c.txt")
        for attempt in range(1, MAX_RETRIES + 1):
            cfile.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
            started = time.monotonic()
            try:
                args = [*tags, "-c", str(cfile), sglang]
                return {
                    "report": sp.pip_report(opts.pip_python, args, opts.index_url),
                    "dropped": dropped,
                }
            except sp.ProbeError as failed:
                output = str(failed)
            sp.log(f"  pip resolve #{attempt}: no solution ({time.monotonic() - started:.0f} s)")
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
    sp.log(f"    {what}: {name}=={conflict['runner']}: {conflict['wanted'][:3]}")
    del constraints[name]
    return {**conflict, "runner_keeps": kept}


def plan_rows(report: Entry, runner: dict[str, str | None], env: dict[str, str]) -> list[Entry]:
    """One row per resolved distribution: runner (has it), protected (never fetched), download."""
    rows = []
    for item in report["install"]:
        meta, url = item["metadata"], item["download_info"]["url"]
        have = runner.get(sp.canon(meta["name"]))
        same = have is not None and Version(have).public == Version(meta["version"]).public
        status = "runner" if same else "protected" if is_protected(meta["name"]) else "download"
        sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if local := local_file(url):  # a fork's wheel, built here: its own digest
            sha = sp.sha256(local)
        extras, dist = item.get("requested_extras") or [], meta.get("requires_dist") or []
        needs = sorted({sp.canon(r.name) for r in deps(dist, env, extras)})
        rows.append({"name": meta["name"], "version": meta["version"], "status": status,
                     "runner": have, "filename": urllib.parse.unquote(url.rsplit("/", 1)[-1]),
                     "url": url, "sha256": sha, "requires": needs})  # fmt: skip
    return sorted(rows, key=lambda r: sp.canon(r["name"]))


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
    names = {sp.canon(d["name"]) for d in (start or {}).get("distributions", [])}
    rows, plan["start_set"] = plan["distributions"], source
    for row in rows:
        row["start_set"] = sp.canon(row["name"]) in names if start else None
    summary = {s: sum(r["status"] == s for r in rows) for s in ("runner", "protected", "download")}
    fetched = sum(r["status"] == "download" and bool(r["start_set"]) for r in rows)
    plan["summary"] = {"resolved": len(rows), **summary, "start_set_downloads": fetched}


def download(plan: Entry, out: Path, everything: bool, opts: argparse.Namespace) -> Entry:
    """pip download of the wheels to fetch (held to the plan's sha256), then manifest.json."""
    rows = [r for r in plan["distributions"] if r["status"] == "download"]
    if not everything and plan.get("start_set") is None:
        raise UsageError(f"the plan has no start set for SGLang {plan['sglang']}: run "
                         "`sglang-wheelhouse probe --plan PLAN` first, or pass --all")  # fmt: skip
    rows = rows if everything else [r for r in rows if r["start_set"]]
    if bad := [r["name"] for r in rows if is_protected(r["name"]) or not r["sha256"]]:
        raise UsageError(f"{bad}: torch/CUDA libraries or files without sha256: resolve again")
    out.mkdir(parents=True, exist_ok=True)
    for row in rows:  # a fork's wheel built here is copied, not downloaded
        if (local := local_file(row.get("url") or "")) is not None:
            if not local.is_file():
                raise CheckFailed(f"{row['name']}: {local} is gone: build the wheel again, or "
                                  "resolve again")  # fmt: skip
            shutil.copyfile(local, out / row["filename"])
    if fetch := [r for r in rows if local_file(r.get("url") or "") is None]:
        reqs = out / ".requirements.txt"
        reqs.write_text(
            "".join(f"{r['name']}=={r['version']} --hash=sha256:{r['sha256']}\n" for r in fetch)
        )
        tags = sp.tag_args(plan["python"], plan["platforms"])
        python = opts.pip_python or sp.pip_python(plan["python"])
        args = ["download", "--no-deps", *tags, "-d", str(out), "-r", str(reqs)]
        done = sp.pip(python, args, plan["index"])
        reqs.unlink()
        if done.returncode:
            raise CheckFailed(f"pip download failed:\n{(done.stdout + done.stderr)[-3000:]}")
    manifest = {key: plan[key] for key in ("sglang", "runner_torch", "python", "platforms")}
    manifest["selection"] = "all" if everything else "start set"
    manifest["files"] = [manifest_entry(out / r["filename"], r) for r in rows]
    write_json(out / "manifest.json", manifest)
    return manifest


def manifest_entry(path: Path, row: Entry) -> Entry:
    digest = sp.sha256(path) if path.is_file() else "missing"
    if digest != row["sha256"]:
        path.unlink(missing_ok=True)
        raise CheckFailed(f"{path.name}: sha256 {digest} is not the index's {row['sha256']}: "
                          "removed it; download again, or resolve again")  # fmt: skip
    return {"name": row["name"], "version": row["version"], "filename": path.name,
            "size": path.stat().st_size, "sha256": digest,
            "why": "start set" if row["start_set"] else "all"}  # fmt: skip


def check(folder: Path) -> tuple[Entry, list[str]]:
    """The manifest, and one line per bad file (missing, wrong size or hash, extra, protected)."""
    fix = "make the wheelhouse with `sglang-wheelhouse download`"
    manifest, bad = load_json(folder / "manifest.json", "manifest", fix), []
    for f in manifest["files"]:
        path, name = folder / f["filename"], f["filename"]
        if is_protected(f["name"]):
            bad.append(f"{name}: {f['name']} is a torch/CUDA library; the runner's own is used")
        elif not path.is_file():
            bad.append(f"{name}: missing")
        elif path.stat().st_size != f["size"]:
            bad.append(f"{name}: {path.stat().st_size} bytes, the manifest says {f['size']}")
        elif (digest := sp.sha256(path)) != f["sha256"]:
            bad.append(f"{name}: sha256 {digest} is not the manifest's {f['sha256']}")
    listed = {f["filename"] for f in manifest["files"]}
    extra = [p.name for p in sorted(folder.glob("*.whl")) if p.name not in listed]
    return manifest, bad + [f"{name}: extra wheel, not in the manifest" for name in extra]


def checked(folder: Path) -> Entry:
    manifest, bad = check(folder)
    for line in bad:
        print(f"bad: {line}")
    if bad:
        raise CheckFailed(f"{len(bad)} bad file(s) in {folder}: download again, to an empty folder")
    return manifest


def write_wrapper(target: Path, python: str, source: Path) -> Path:
    """TARGET/bin/python: TARGET ahead of PYTHONPATH, exported for the server's children."""
    wrapper = target / "bin" / "python"
    sp.write_atomic(wrapper, "#!/bin/sh\n"
                 f"# SGLang from the wheelhouse {source} on {python} (sglang-wheelhouse install)\n"
                 f'PYTHONPATH={shlex.quote(str(target))}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                 f'export PYTHONPATH\nexec {shlex.quote(python)} "$@"\n', 0o755)  # fmt: skip
    return wrapper


def install(folder: Path, target: Path, python: str, smoke: list[str]) -> Path:
    """check, pip install --no-index --target, the wrapper, then import ``smoke`` through it."""
    wheels = [str(folder / f["filename"]) for f in checked(folder)["files"]]
    args = ["install", "--no-index", "--no-deps", "--no-compile", "--upgrade", "--target"]
    cmd = [python, "-m", "pip", *args, str(target), *wheels]
    done = subprocess.run(cmd, env=sp.pip_env(), capture_output=True, text=True, check=False)
    if done.returncode:
        raise CheckFailed(f"pip install failed:\n{(done.stdout + done.stderr)[-3000:]}")
    wrapper = write_wrapper(target, python, folder)
    code = "import importlib as i, sys; m = [i.import_module(n) for n in sys.argv[1:]][0]\n"
    cmd = [str(wrapper), "-c", code + "print(getattr(m, '__version__', '?'), m.__file__)", *smoke]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise CheckFailed(f"import {smoke} with {wrapper} failed:\n{done.stderr[-3000:]}")
    version, where = done.stdout.strip().splitlines()[-1].split(" ", 1)
    if not Path(where).resolve().is_relative_to(target.resolve()):
        raise CheckFailed(f"{smoke[0]} imported from {where}, not from {target}")
    print(f"{smoke[0]} {version} imports from {where}")
    return wrapper


def cmd_resolve(opts: argparse.Namespace) -> None:
    runner = load_runner(opts.runner_freeze)
    opts.platforms = opts.platform or PLATFORMS
    env = target_env(opts.python_version, opts.platforms)
    opts.pip_python = opts.pip_python or sp.pip_python(env["python_version"])
    if opts.sglang_wheel:  # a fork's wheel: its own version, its own requirements
        wheel = opts.sglang_wheel.resolve()
        if not wheel.is_file():
            raise UsageError(f"--sglang-wheel {opts.sglang_wheel}: no such file; build it with "
                             "scripts/build-sglang-fork-wheel")  # fmt: skip
        release = {"chosen": wheel_version(wheel), "rejected": [], "wheel": str(wheel)}
        requirement = f"sglang @ {wheel.as_uri()}"
    else:
        release = pick_release(opts.sglang, str(runner["torch"]), opts, env)
        requirement = f"sglang=={release['chosen']}"
    sglang, rejected = release["chosen"], "".join(f"\n  rejected {r}" for r in release["rejected"])
    sp.log(f"SGLang {sglang} for torch {runner['torch']}{rejected}")
    found = resolve(requirement, runner, opts)
    plan = {"sglang": sglang, "python": opts.python_version, "platforms": opts.platforms,
            "index": opts.index_url, "runner_freeze": str(opts.runner_freeze),
            "runner_torch": runner["torch"], "release": release, "dropped_constraints":
            found["dropped"], "distributions": plan_rows(found["report"], runner, env)}  # fmt: skip
    start = HERE / f"sglang-start-set-{sglang}.json"
    known = load_json(start, "start set", "probe again") if start.is_file() else None
    mark_start_set(plan, known, str(start) if known else None)
    if not known:
        sp.log(f"no start set at {start}: run `sglang-wheelhouse probe --plan {opts.out}`")
    write_json(opts.out, plan)
    sp.log(f"plan: {opts.out}: {plan['summary']}")


def cmd_probe(opts: argparse.Namespace) -> None:
    plan = load_json(opts.plan, "plan", "make it with `sglang-wheelhouse resolve`")
    opts.cache.mkdir(parents=True, exist_ok=True)
    start = sp.probe(plan, opts.python, opts.torch, opts.cache, opts.keep_venv)
    out = opts.out or HERE / f"sglang-start-set-{plan['sglang']}.json"
    write_json(out, start)
    mark_start_set(plan, start, str(out))
    write_json(opts.plan, plan)
    sp.log(f"start set: {out}: {start['summary']}; plan {opts.plan}: {plan['summary']}")
    if start["blocked"]:
        raise CheckFailed(f"these modules still fail on a CPU, look at them: {start['blocked']}")


def cmd_download(opts: argparse.Namespace) -> None:
    plan = load_json(opts.plan, "plan", "make it with `sglang-wheelhouse resolve`")
    files = download(plan, opts.out, opts.all, opts)["files"]
    size = sum(f["size"] for f in files) / 1e6
    sp.log(f"{opts.out}: {len(files)} wheels, {size:.1f} MB, manifest.json")


def cmd_check(opts: argparse.Namespace) -> None:
    manifest = checked(opts.folder)
    size = sum(f["size"] for f in manifest["files"]) / 1e6
    print(f"ok: {len(manifest['files'])} wheels, {size:.1f} MB, SGLang {manifest['sglang']}")


def cmd_install(opts: argparse.Namespace) -> None:
    wrapper = install(opts.folder, opts.target.absolute(), opts.python, opts.smoke.split(","))
    print(f"export SPECDEC_SGLANG_PYTHON={wrapper}")


def parser() -> argparse.ArgumentParser:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-wheelhouse"
    top = argparse.ArgumentParser(prog="sglang-wheelhouse", description=__doc__)
    top.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("resolve", help="the plan: every distribution the runner needs")
    p.add_argument("--runner-freeze", type=Path, required=True, help="its pip list --format freeze")
    p.add_argument("--sglang", default=DEFAULT_SGLANG, help="a release, or auto: newest that fits")
    p.add_argument(
        "--sglang-wheel",
        type=Path,
        default=None,
        help="a fork's wheel (scripts/build-sglang-fork-wheel) instead of a release",
    )
    p.add_argument("--python-version", default="3.12", help="the runner's Python")
    p.add_argument("--platform", action="append", help="repeat; default manylinux, glibc <= 2.35")
    p.add_argument("--out", type=Path, default=Path("sglang-plan.json"))
    p.add_argument("--index-url", default="https://pypi.org/simple")
    p = sub.add_parser("probe", help="the start set: what the server imports (on a CPU)")
    p.add_argument("--plan", type=Path, required=True)
    p.add_argument("--out", type=Path, help="default scripts/sglang-start-set-<V>.json")
    p.add_argument("--python", default=sys.executable, help="python of the throwaway venv")
    p.add_argument("--torch", default="torch==2.13.0+cpu", help="torch of the venv (CPU build)")
    p.add_argument("--keep-venv", action="store_true")
    p = sub.add_parser("download", help="the wheels the runner lacks, and manifest.json")
    p.add_argument("plan", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--all", action="store_true", help="all the runner lacks, not the start set")
    sub.add_parser("check", help="check a wheelhouse").add_argument("folder", type=Path)
    p = sub.add_parser("install", help="on the runner: install a wheelhouse into a folder")
    p.add_argument("folder", type=Path)
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--python", default=sys.executable, help="the runner's python (with torch)")
    p.add_argument("--smoke", default=SMOKE, help="modules to import after, comma-separated")
    sub.choices["probe"].add_argument("--cache", type=Path, default=cache)
    for name in ("resolve", "download"):
        sub.choices[name].add_argument("--pip-python", help="python whose pip runs (runner's X.Y)")
    return top


COMMANDS = {"resolve": cmd_resolve, "probe": cmd_probe, "download": cmd_download,
            "check": cmd_check, "install": cmd_install}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    started = time.monotonic()
    try:
        COMMANDS[opts.command](opts)
    except UsageError as exc:
        print(f"sglang-wheelhouse {opts.command}: error: {exc}", file=sys.stderr)
        return 2
    except (CheckFailed, sp.ProbeError) as exc:
        print(f"sglang-wheelhouse {opts.command}: failed: {exc}", file=sys.stderr)
        return 1
    sp.log(f"{opts.command}: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
