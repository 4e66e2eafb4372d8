"""sglang-wheelhouse: SGLang for an air-gapped GPU runner, from wheels fetched where PyPI is.

resolve (pip's resolver for the runner's Python and platform, held to its freeze), probe (the start
set: installs/probe.py), download (the start-set wheels the runner lacks, hashed, manifest.json),
check (the manifest's files, whole, nothing else), install (on the runner). Torch, torchvision,
torchaudio, triton, CUDA libraries (nvidia-*, cuda-*) are the runner's: never replaced or fetched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from specdec_lab.installs.probe import probe
from specdec_lab.installs.resolve import (
    DEFAULT_SGLANG,
    PLATFORMS,
    load_runner,
    mark_start_set,
    pick_release,
    plan_rows,
    resolve,
    target_env,
    wheel_version,
)
from specdec_lab.installs.shared import (
    CheckFailed,
    ProbeError,
    UsageError,
    load_json,
    log,
    pip_python,
    write_json,
)
from specdec_lab.installs.wheelhouse import checked, download, install

HERE = Path(__file__).resolve().parents[2] / "scripts"  # the committed start sets


SMOKE = "sglang,sglang.srt.server_args"


def cmd_resolve(opts: argparse.Namespace) -> None:
    runner = load_runner(opts.runner_freeze)
    opts.platforms = opts.platform or PLATFORMS
    env = target_env(opts.python_version, opts.platforms)
    opts.pip_python = opts.pip_python or pip_python(env["python_version"])
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
    log(f"SGLang {sglang} for torch {runner['torch']}{rejected}")
    found = resolve(requirement, runner, opts)
    plan = {"sglang": sglang, "python": opts.python_version, "platforms": opts.platforms,
            "index": opts.index_url, "runner_freeze": str(opts.runner_freeze),
            "runner_torch": runner["torch"], "release": release, "dropped_constraints":
            found["dropped"], "distributions": plan_rows(found["report"], runner, env)}  # fmt: skip
    start = HERE / f"sglang-start-set-{sglang}.json"
    known = load_json(start, "start set", "probe again") if start.is_file() else None
    mark_start_set(plan, known, str(start) if known else None)
    if not known:
        log(f"no start set at {start}: run `sglang-wheelhouse probe --plan {opts.out}`")
    write_json(opts.out, plan)
    log(f"plan: {opts.out}: {plan['summary']}")


def cmd_probe(opts: argparse.Namespace) -> None:
    plan = load_json(opts.plan, "plan", "make it with `sglang-wheelhouse resolve`")
    opts.cache.mkdir(parents=True, exist_ok=True)
    start = probe(plan, opts.python, opts.torch, opts.cache, opts.keep_venv)
    out = opts.out or HERE / f"sglang-start-set-{plan['sglang']}.json"
    write_json(out, start)
    mark_start_set(plan, start, str(out))
    write_json(opts.plan, plan)
    log(f"start set: {out}: {start['summary']}; plan {opts.plan}: {plan['summary']}")
    if start["blocked"]:
        raise CheckFailed(f"these modules still fail on a CPU, look at them: {start['blocked']}")


def cmd_download(opts: argparse.Namespace) -> None:
    plan = load_json(opts.plan, "plan", "make it with `sglang-wheelhouse resolve`")
    files = download(plan, opts.out, opts.all, opts)["files"]
    size = sum(f["size"] for f in files) / 1e6
    log(f"{opts.out}: {len(files)} wheels, {size:.1f} MB, manifest.json")


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
    except (CheckFailed, ProbeError) as exc:
        print(f"sglang-wheelhouse {opts.command}: failed: {exc}", file=sys.stderr)
        return 1
    log(f"{opts.command}: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
