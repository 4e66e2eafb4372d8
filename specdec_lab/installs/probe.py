"""The start set of an SGLang release (what its server imports, found on a CPU), and the pip,
wheel and file helpers that sglang_wheelhouse.py shares. A throwaway venv (CPU torch, sglang
--no-deps) imports the server's modules with a shim that makes torch report an H200 (9.0); a
missing module is mapped to its distribution (the wheel's RECORD), installed, and the loop goes
on; a module present but not importable on a CPU is stubbed. Last: AT_BOOT, and the closure over
the plan's dependency edges, restricted to what the runner lacks."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import IO, Any, cast

from pytest_specdec.core.modelfile import sha256_of

sha256 = sha256_of  # one file hashing routine for the package and the wheelhouse

Entry = dict[str, Any]
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


class UsageError(Exception):
    """Bad input: the message names the value and the fix (exit 2)."""


class ProbeError(Exception):
    """A step cannot go on: the message says why (pip's output, for a pip failure)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_env(isolated: bool = True) -> dict[str, str]:
    """Environment for pip; ``isolated`` drops the machine's pip configuration (constraints,
    find-links, extra indexes): only the index given, and PIP_CERT, count."""
    if not isolated:
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_python(minor: str) -> str:
    """A python of the runner's X.Y (python3.X on PATH, or pyenv's): pip evaluates dependency
    markers for the interpreter it runs under, whatever --python-version says."""
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{minor}.*/bin/python")))
    for python in filter(None, [shutil.which(f"python{minor}"), *pyenv]):
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
        if done.stdout.strip() == minor:
            return python
    log(f"no python{minor} found: pip's markers follow {sys.executable} (pass --pip-python)")
    return sys.executable


def tag_args(python_version: str, platforms: list[str]) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    return args + [a for p in platforms for a in ("--platform", p)]


def pip(python: str, args: list[str], index: str) -> subprocess.CompletedProcess[str]:
    cmd = [python, "-m", "pip", *args, "--index-url", index]
    return subprocess.run(cmd, env=pip_env(), capture_output=True, text=True, check=False)


def pip_report(python: str, args: list[str], index: str) -> Entry:
    """``pip install --dry-run --report`` (metadata by range requests: fast-deps)."""
    with tempfile.TemporaryDirectory(prefix="sglang-pip-") as tmp:
        dry = ["install", "--dry-run", "--ignore-installed", "--target", f"{tmp}/t"]
        dry += ["--use-feature=fast-deps", "--report", f"{tmp}/report.json", *args]
        done = pip(python, dry, index)
        if done.returncode:
            raise ProbeError(done.stdout + done.stderr)
        report: Entry = json.loads(Path(tmp, "report.json").read_text())
        return report


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Entry) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def load_json(path: Path, what: str, fix: str) -> Entry:
    try:
        data: Entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{what} {path} not found: {fix}") from None
    except ValueError as exc:
        raise UsageError(f"{what} {path} is not JSON ({exc}): {fix}") from None
    return data


class RemoteFile:
    """Read-only, seekable view of a remote file through HTTP range requests."""

    def __init__(self, url: str) -> None:
        self.url, self.pos, self.start, self.data = url, 0, -1, b""
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            self.size = int(r.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = [offset, self.pos + offset, self.size + offset][whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        if n > 0 and not self.start <= self.pos <= self.pos + n <= self.start + len(self.data):
            span = {"Range": f"bytes={self.pos}-{min(self.pos + max(n, 1 << 18), self.size) - 1}"}
            with urllib.request.urlopen(urllib.request.Request(self.url, headers=span)) as r:
                if r.status != 206:
                    raise OSError(f"{self.url}: the server ignores range requests")
                self.start, self.data = self.pos, r.read()
        chunk = self.data[self.pos - self.start : self.pos - self.start + max(n, 0)]
        self.pos += len(chunk)
        return chunk


def wheel_record(url: str, cache: Path) -> str:
    """The RECORD of a wheel: read in place by range requests, or downloaded once to ``cache``."""
    try:
        remote = url.startswith(("http://", "https://"))
        wheel = zipfile.ZipFile(
            cast(IO[bytes], RemoteFile(url)) if remote else url[7 * url.startswith("file://") :]
        )
    except OSError:
        local = cache / "wheels" / url.rsplit("/", 1)[-1]
        if not local.is_file():
            local.parent.mkdir(parents=True, exist_ok=True)
            urllib.request.urlretrieve(url, local)
        wheel = zipfile.ZipFile(local)
    with wheel:
        names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
        return wheel.read(names[0]).decode() if names else ""


def top_level_modules(record: str) -> set[str]:
    """Importable top-level names of a wheel, from its RECORD."""
    tops = set()
    for line in record.splitlines():
        parts = line.split(",", 1)[0].split("/")
        if parts[0].endswith(".data") and len(parts) > 3 and parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        if len(parts) > 1:
            tops.add(parts[0])
        elif parts[0].endswith((".py", ".so", ".pyd")):
            tops.add(parts[0].split(".")[0])
    return {t for t in tops if t.isidentifier()}


class ModuleIndex:
    """Which distribution of the plan provides a top-level module (RECORDs, cached)."""

    def __init__(self, entries: list[Entry], cache: Path) -> None:
        self.entries, self.cache, self.path = entries, cache, cache / "top-level.json"
        self.known = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def tops(self, entry: Entry) -> set[str]:
        if (key := entry["filename"]) not in self.known:
            self.known[key] = sorted(top_level_modules(wheel_record(entry["url"], self.cache)))
            self.path.write_text(json.dumps(self.known, indent=1, sort_keys=True))
        return set(self.known[key])

    def provider(self, module: str) -> Entry | None:
        """Likely names first (module == name, same prefix), the runner's own last."""
        guess = canon(module)
        prefix = guess.split("-")[0]

        def rank(entry: Entry) -> tuple[bool, bool, bool]:
            name = canon(entry["name"])
            return name != guess, not name.startswith(prefix), entry["status"] == "runner"

        return next((e for e in sorted(self.entries, key=rank) if module in self.tops(e)), None)


SHIM = '''"""sglang-wheelhouse probe: torch reports one CUDA device, an NVIDIA H200 (9.0); modules
named in SGLANG_PROBE_STUBS import as a Stub: any attribute, call, decorator, base, type hint;
fake kernels registered for their ops (torch.library.register_fake) are skipped."""
import importlib.abc, importlib.machinery, os, sys, types

def _dunder(name):
    raise AttributeError(name)

_Any = type("_Any", (type,), {
    "__new__": lambda mcs, name, bases, ns, **kw: type.__new__(mcs, name, bases, ns),
    "__init__": lambda cls, name, bases, ns, **kw: None,
    "__getattr__": lambda cls, name: _dunder(name) if name.startswith("__") else cls,
    "__call__": lambda cls, *a, **kw: a[0] if len(a) == 1 and callable(a[0]) and not kw else cls,
    "__getitem__": lambda cls, item: cls, "__or__": lambda cls, o: cls,
    "__ror__": lambda cls, o: cls, "__iter__": lambda cls: iter(())})
Stub = _Any("Stub", (), {})
STUBS = set(filter(None, os.environ.get("SGLANG_PROBE_STUBS", "").split(",")))

class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STUBS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__, module.__getattr__ = [], lambda n: _dunder(n) if n[:2] == "__" else Stub
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _StubFinder())

def _fake_h200(torch):
    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, warp_size=32,
                                  total_memory=150 * 10**9, multi_processor_count=132)
    for name, value in {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "get_device_capability": lambda device=None: (9, 0),
        "get_device_name": lambda device=None: "NVIDIA H200",
        "get_device_properties": lambda device=None: props,
        "is_bf16_supported": lambda *a, **k: True,
        "mem_get_info": lambda device=None: (140 * 10**9, 150 * 10**9)}.items():
        setattr(torch.cuda, name, value)
    torch.version.cuda = "13.0"

def _tolerate_stubbed_ops(torch):
    # SGLang registers fake (meta) kernels for the ops of its CUDA kernel library when torch
    # reports CUDA; the library is a Stub here, so its ops were never defined: skip those.
    real = getattr(getattr(torch, "library", None), "register_fake", None)
    if real is None:
        return

    def register_fake(op, func=None, /, *args, **kwargs):
        if isinstance(op, str) and op.split("::")[0] in STUBS:
            return func if func is not None else (lambda f: f)
        return real(op, func, *args, **kwargs)

    torch.library.register_fake = register_fake

try:
    import torch
    _fake_h200(torch)
    _tolerate_stubbed_ops(torch)
except ImportError:  # an interpreter without torch, started by the imports
    pass
'''

CHILD = """import importlib, importlib.metadata, importlib.util, json, re, sys, sysconfig, traceback
SITE = sysconfig.get_paths()["purelib"] + "/"

def where(exc):  # the line that ran the failing import
    frames = traceback.extract_tb(exc.__traceback__)
    f = ([f for f in frames if not f.filename.startswith("<")] or frames)[-1]
    return f"{f.filename.replace(SITE, '')}:{f.lineno}"

def failure(exc):  # a missing module or distribution anywhere in the chain, else the culprit
    chain = [exc]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) and cause not in chain:
        chain.append(cause)
    for e in chain:
        top = (getattr(e, "name", None) or "").split(".")[0]
        if isinstance(e, importlib.metadata.PackageNotFoundError):  # a version check
            quoted = re.search(r"'([A-Za-z0-9][A-Za-z0-9_.-]*)", str(e.args[0]))
            dist = quoted.group(1) if quoted else str(e.args[0])
            return {"missing_dist": dist, "where": where(e)}
        if isinstance(e, ModuleNotFoundError) and top and importlib.util.find_spec(top) is None:
            return {"missing": top, "where": where(e)}
    files = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    tops = [f[len(SITE):].split("/")[0].split(".")[0] for f in files if f.startswith(SITE)]
    return {"broken": ([t for t in tops if t != "torch"] or [None])[-1], "where": where(exc)}

out = []
for target in sys.argv[2:]:
    try:
        importlib.import_module(target)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[:400]
        out.append({"target": target, "error": error, **failure(exc)})
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh)
"""


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
