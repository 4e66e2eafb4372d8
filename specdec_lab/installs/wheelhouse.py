"""The wheelhouse: the plan's wheels downloaded (held to their sha256) with ``manifest.json``,
checked (the manifest's files, whole, nothing else) and installed on the runner into a folder
of their own, behind a wrapper that puts it ahead of ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

from specdec_lab.installs import shared
from specdec_lab.installs.resolve import is_protected, local_file
from specdec_lab.installs.shared import (
    CheckFailed,
    Entry,
    UsageError,
    load_json,
    pip_env,
    pip_python,
    sha256,
    tag_args,
    write_atomic,
    write_json,
)


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
        tags = tag_args(plan["python"], plan["platforms"])
        python = opts.pip_python or pip_python(plan["python"])
        args = ["download", "--no-deps", *tags, "-d", str(out), "-r", str(reqs)]
        done = shared.pip(python, args, plan["index"])
        reqs.unlink()
        if done.returncode:
            raise CheckFailed(f"pip download failed:\n{(done.stdout + done.stderr)[-3000:]}")
    manifest = {key: plan[key] for key in ("sglang", "runner_torch", "python", "platforms")}
    manifest["selection"] = "all" if everything else "start set"
    manifest["files"] = [manifest_entry(out / r["filename"], r) for r in rows]
    write_json(out / "manifest.json", manifest)
    return manifest


def manifest_entry(path: Path, row: Entry) -> Entry:
    digest = sha256(path) if path.is_file() else "missing"
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
        elif (digest := sha256(path)) != f["sha256"]:
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
    write_atomic(wrapper, "#!/bin/sh\n"
                 f"# SGLang from the wheelhouse {source} on {python} (sglang-wheelhouse install)\n"
                 f'PYTHONPATH={shlex.quote(str(target))}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                 f'export PYTHONPATH\nexec {shlex.quote(python)} "$@"\n', 0o755)  # fmt: skip
    return wrapper


def install(folder: Path, target: Path, python: str, smoke: list[str]) -> Path:
    """check, pip install --no-index --target, the wrapper, then import ``smoke`` through it."""
    wheels = [str(folder / f["filename"]) for f in checked(folder)["files"]]
    args = ["install", "--no-index", "--no-deps", "--no-compile", "--upgrade", "--target"]
    cmd = [python, "-m", "pip", *args, str(target), *wheels]
    done = subprocess.run(cmd, env=pip_env(), capture_output=True, text=True, check=False)
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
