"""scripts/sglang-wheelhouse (specdec_lab/installs): SGLang for an air-gapped runner from a
wheelhouse.

No network here: pip's resolver and downloader are replaced by fakes that answer with captured
output; ``install`` runs the real pip (``--no-index``) on a tiny wheel made by the test.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from specdec_lab.cli import sglang_wheelhouse as cli
from specdec_lab.installs import probe, probe_code, wheels
from specdec_lab.installs import resolve as rs
from specdec_lab.installs import shared as sh
from specdec_lab.installs import wheelhouse as wh

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"

FREEZE = """\
# pip list --format freeze, from the runner
numpy==2.5.2
PyYAML==6.0.3
typing_extensions==4.16.0
torch==2.11.0+cu130
nvidia-nccl-cu13==2.28.9
cuda-bindings==13.3.1
transformers==5.17.0
tokenizers==0.23.2
mylib @ file:///wheels/mylib-1.2.3-py3-none-any.whl
triton @ file:///build/triton-3.6.0%2Bgit1234-cp312-cp312-linux_x86_64.whl
weird @ git+https://example.invalid/weird.git
"""


def opts(**kw: Any) -> argparse.Namespace:
    base = {"python_version": "3.12", "platforms": ["manylinux_2_28_x86_64"],
            "pip_python": sys.executable, "index_url": "https://index.invalid/simple"}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


# --- the runner's freeze --------------------------------------------------------------------


def test_freeze_lines_pins_urls_and_local_versions() -> None:
    runner = rs.parse_freeze(FREEZE, "freeze.txt")
    assert runner["torch"] == "2.11.0+cu130" and runner["pyyaml"] == "6.0.3"
    assert runner["typing-extensions"] == "4.16.0"  # canonical names
    assert runner["mylib"] == "1.2.3" and runner["triton"] == "3.6.0+git1234"
    assert runner["weird"] is None  # present, version unknown: never taken as "same"


@pytest.mark.parametrize("line", ["numpy", "numpy>=2", "numpy==2.*", "==1.0", "numpy==x.y"])
def test_freeze_line_that_is_not_one_version_is_an_error(line: str) -> None:
    with pytest.raises(sh.UsageError, match=r"f.txt:2: cannot read .*expected name==version"):
        rs.parse_freeze(f"torch==2.11.0\n{line}\n", "f.txt")


def test_missing_freeze_or_no_torch_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(sh.UsageError, match="not found: on the runner run `python3 -m pip list"):
        rs.load_runner(tmp_path / "nope.txt")
    (tmp_path / "f.txt").write_text("numpy==2.5.2\n")
    with pytest.raises(sh.UsageError, match="has no torch==VERSION line"):
        rs.load_runner(tmp_path / "f.txt")


def test_protected_is_the_torch_and_cuda_stack() -> None:
    for name in [
        "torch",
        "TorchVision",
        "torchaudio",
        "triton",
        "nvidia-cublas",
        "nvidia_cudnn_cu13",
        "cuda-bindings",
        "cuda_python",
        "nvidia-cutlass-dsl",
    ]:
        assert rs.is_protected(name), name
    for name in ["transformers", "tokenizers", "torchao", "sglang-kernel", "flashinfer-python"]:
        assert not rs.is_protected(name), name


# --- choosing a release ---------------------------------------------------------------------


ENV = rs.target_env("3.12", ["manylinux_2_28_x86_64"])


def test_requires_dist_is_read_for_the_runner_with_extras() -> None:
    text = [
        'torch==2.9.0; sys_platform == "darwin"',
        "torchaudio==2.11.0",
        "torch==2.11.0",
        'pytest; extra == "test"',
        'cuda-tile; extra == "cu13"',
        'tomli; python_version < "3.11"',
    ]
    assert [str(r) for r in rs.deps(text, ENV)] == ["torchaudio==2.11.0", "torch==2.11.0"]
    assert [r.name for r in rs.deps(text, ENV, ["cu13"])] == ["torchaudio", "torch", "cuda-tile"]
    assert [r.name for r in rs.deps(text, rs.target_env("3.10", []))][-1] == "tomli"


def pin(text: str | None) -> Any:
    return rs.deps([text], ENV)[0].specifier if text else None


def test_newest_release_whose_torch_pin_fits_is_chosen() -> None:
    pins = {"0.5.23": "torch==2.14.1", "0.5.18": "torch==2.13.0", "0.5.17.post1": None,
            "0.5.17": "torch==2.11.0", "0.5.16": "torch==2.11.0"}  # fmt: skip
    read: list[str] = []

    def candidates() -> Any:
        for version, req in pins.items():
            read.append(version)
            yield version, pin(req)

    release = rs.choose_release(candidates(), "2.11.0+cu130")
    assert release["chosen"] == "0.5.17"  # 2.11.0+cu130 satisfies ==2.11.0
    assert release["rejected"] == ["0.5.23 pins torch==2.14.1", "0.5.18 pins torch==2.13.0",
                                   "0.5.17.post1 requires no torch"]  # fmt: skip
    assert read == ["0.5.23", "0.5.18", "0.5.17.post1", "0.5.17"]  # older ones are never read
    with pytest.raises(sh.UsageError, match=r"no SGLang release fits .* 2\.10\.0 .*0\.5\.16 pins"):
        rs.choose_release(candidates(), "2.10.0")


def fake_index(pins: dict[str, str]) -> Any:
    """pip index versions / pip install --dry-run --no-deps --report for SGLang releases."""

    def pip(python: str, args: list[str], index: str) -> subprocess.CompletedProcess[str]:
        if args[:2] == ["index", "versions"]:
            return subprocess.CompletedProcess(
                args, 0, f"Available versions: {', '.join(pins)}", ""
            )
        version = args[-1].split("==")[1]
        meta = {
            "metadata": {"name": "sglang", "version": version, "requires_dist": [pins[version]]}
        }
        Path(args[args.index("--report") + 1]).write_text(json.dumps({"install": [meta]}))
        return subprocess.CompletedProcess(args, 0, "", "")

    return pip


def test_pick_release_auto_and_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    pins = {"0.5.23": "torch==2.14.1", "0.5.18": "torch==2.13.0", "0.5.17": "torch==2.11.0"}
    monkeypatch.setattr(sh, "pip", fake_index(pins))
    release = rs.pick_release("auto", "2.11.0+cu130", opts(), ENV)
    assert release == {"chosen": "0.5.17", "rejected": ["0.5.23 pins torch==2.14.1",
                                                         "0.5.18 pins torch==2.13.0"]}  # fmt: skip
    assert rs.pick_release("0.5.18", "2.11.0", opts(), ENV)["chosen"] == "0.5.18"
    with pytest.raises(sh.UsageError, match=r"unknown SGLang version '9\.9' \(newest: 0\.5\.23"):
        rs.pick_release("9.9", "2.11.0", opts(), ENV)


# --- pip's resolver, retried past the runner's conflicting pins -----------------------------

NUMBA = """\
ERROR: Cannot install sglang==0.5.17 because these package versions have conflicting dependencies.

The conflict is caused by:
    sglang 0.5.17 depends on numba==0.65.1
    The user requested (constraint) numba==0.68.0
"""
TRANSFORMERS = """\
The conflict is caused by:
    transformers 5.12.1 depends on tokenizers<=0.23.0 and >=0.22.0
    The user requested (constraint) tokenizers==0.23.2
"""
CUDA_BINDINGS = """\
The conflict is caused by:
    cuda-python 13.0.0 depends on cuda-bindings~=13.0.0
    cuda-python 13.4.4 depends on cuda-bindings~=13.4.4
    humming-kernels[cu13] 0.1.10 depends on cuda-bindings
    torch 2.11.0 depends on cuda-bindings<14 and >=13.0.3; platform_system == "Linux"
    The user requested (constraint) cuda-bindings==13.3.1
"""
TORCH = """\
The conflict is caused by:
    sglang 0.5.18 depends on torch==2.13.0
    The user requested (constraint) torch==2.11.0
"""


def test_conflict_text_names_the_runner_pin_and_what_wants_another() -> None:
    constraints = {"numba": "0.68.0", "tokenizers": "0.23.2", "torch": "2.11.0"}
    (numba,) = rs.runner_conflicts(NUMBA, constraints)
    assert numba == {"name": "numba", "runner": "0.68.0", "wanted": [
        "sglang 0.5.17 depends on numba==0.65.1"], "blocking": [
        "sglang 0.5.17 depends on numba==0.65.1"]}  # fmt: skip
    (tok,) = rs.runner_conflicts(TRANSFORMERS, constraints)
    assert tok["blocking"] == ["transformers 5.12.1 depends on tokenizers<=0.23.0 and >=0.22.0"]
    assert rs.runner_conflicts("ERROR: no space left on device", constraints) == []


def test_a_cuda_package_the_runner_lacks_does_not_block_the_runners_cuda_lib() -> None:
    (conflict,) = rs.runner_conflicts(CUDA_BINDINGS, {"cuda-bindings": "13.3.1"})
    assert len(conflict["wanted"]) == 4 and conflict["blocking"] == []


class FakePip:
    """pip install --dry-run: fails with the next captured text until none is left, then
    writes ``report`` where --report says."""

    def __init__(self, failures: list[str], report: dict[str, Any]) -> None:
        self.failures, self.report, self.constraints = failures, report, []  # type: ignore[var-annotated]

    def __call__(
        self, python: str, args: list[str], index: str
    ) -> subprocess.CompletedProcess[str]:
        assert "--dry-run" in args and "--use-feature=fast-deps" in args
        self.constraints.append(Path(args[args.index("-c") + 1]).read_text())
        if self.failures:
            return subprocess.CompletedProcess(args, 1, "", self.failures.pop(0))
        Path(args[args.index("--report") + 1]).write_text(json.dumps(self.report))
        return subprocess.CompletedProcess(args, 0, "", "")


def test_resolve_drops_conflicting_runner_pins_and_keeps_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakePip([NUMBA, TRANSFORMERS, CUDA_BINDINGS], {"install": []})
    monkeypatch.setattr(sh, "pip", fake)
    runner = rs.parse_freeze(FREEZE + "numba==0.68.0\n", "f")
    found = rs.resolve("sglang==0.5.17", runner, opts())
    assert [d["name"] for d in found["dropped"]] == ["numba", "tokenizers", "cuda-bindings"]
    assert [d["runner_keeps"] for d in found["dropped"]] == [False, False, True]
    assert "torch==2.11.0\n" in fake.constraints[-1]  # the public version: +cu130 is local
    assert "numba==" not in fake.constraints[-1] and "tokenizers==" not in fake.constraints[-1]
    assert "transformers==5.17.0" in fake.constraints[-1]


def test_resolve_never_drops_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sh, "pip", FakePip([TORCH], {"install": []}))
    with pytest.raises(sh.UsageError) as err:
        rs.resolve("sglang==0.5.18", rs.parse_freeze(FREEZE, "f"), opts())
    message = str(err.value)
    assert (
        "runner's torch 2.11.0" in message and "sglang 0.5.18 depends on torch==2.13.0" in message
    )
    assert "--sglang auto" in message


def test_resolve_reports_an_unrelated_pip_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sh, "pip", FakePip(["ERROR: HTTP error 503"], {"install": []}))
    with pytest.raises(
        sh.CheckFailed, match=r"cannot resolve sglang==0\.5\.17:\nERROR: HTTP error 503"
    ):
        rs.resolve("sglang==0.5.17", rs.parse_freeze(FREEZE, "f"), opts())


def item(name: str, version: str, requires: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    url = f"https://files.invalid/{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return {"metadata": {"name": name, "version": version, "requires_dist": requires or []},
            "download_info": {"url": url, "archive_info": {"hashes": {"sha256": "ab" * 32}}},
            **kw}  # fmt: skip


def test_plan_rows_mark_what_the_runner_has_and_never_fetch_cuda() -> None:
    report = {"install": [
        item("torch", "2.11.0"), item("transformers", "5.12.1", ["tokenizers<0.23"]),
        item("tokenizers", "0.22.2"), item("nvidia-cutlass-dsl", "4.6.0"),
        item("numpy", "2.5.2"),
        item("flashinfer-python", "0.6.15", ["nccl4py", 'cuda-tile; extra == "cu13"',
             'pytest; extra == "test"', 'pywin32; sys_platform == "win32"'],
             requested_extras=["cu13"]),
    ]}  # fmt: skip
    rows = {r["name"]: r for r in rs.plan_rows(report, rs.parse_freeze(FREEZE, "f"), ENV)}
    assert rows["torch"]["status"] == "runner"  # 2.11.0 is the runner's 2.11.0+cu130
    assert rows["numpy"]["status"] == "runner"
    assert rows["transformers"]["status"] == rows["tokenizers"]["status"] == "download"
    assert rows["nvidia-cutlass-dsl"]["status"] == "protected"
    assert rows["flashinfer-python"]["requires"] == ["cuda-tile", "nccl4py"]
    assert rows["tokenizers"]["filename"] == "tokenizers-0.22.2-py3-none-any.whl"


def test_start_set_closes_over_what_the_runner_lacks() -> None:
    plan = {name: {"name": name, "status": status, "requires": needs} for name, status, needs in [
        ("sglang", "download", ["pydantic", "tilelang", "torch"]),
        ("pydantic", "download", ["pydantic-core", "annotated-types", "typing-extensions"]),
        ("pydantic-core", "download", ["typing-extensions"]), ("annotated-types", "download", []),
        ("typing-extensions", "runner", []), ("tilelang", "download", ["nvidia-cutlass-dsl"]),
        ("flashinfer-python", "download", ["nvidia-cutlass-dsl", "apache-tvm-ffi"]),
        ("apache-tvm-ffi", "download", []), ("nvidia-cutlass-dsl", "protected", []),
        ("torch", "runner", []),
    ]}  # fmt: skip
    found = {"sglang": {"how": "the server itself"}, "pydantic": {"how": "imported"},
             "flashinfer-python": {"how": "present, not importable on a CPU"}}  # fmt: skip
    protected = probe.close_over_deps(found, plan)
    assert sorted(found) == ["annotated-types", "apache-tvm-ffi", "flashinfer-python",
                             "pydantic", "pydantic-core", "sglang"]  # fmt: skip
    assert found["pydantic-core"] == {"how": "dependency", "why": "required by pydantic"}
    assert protected == ["nvidia-cutlass-dsl (required by flashinfer-python)"]


def test_mark_start_set_counts_downloads() -> None:
    plan = {"distributions": [{"name": "sglang", "status": "download"},
                              {"name": "Pydantic", "status": "download"},
                              {"name": "tilelang", "status": "download"},
                              {"name": "torch", "status": "runner"}]}  # fmt: skip
    rs.mark_start_set(plan, {"distributions": [{"name": "sglang"}, {"name": "pydantic"}]}, "s.json")
    assert [r["start_set"] for r in plan["distributions"]] == [True, True, False, False]
    assert plan["summary"] == {"resolved": 4, "runner": 1, "protected": 0, "download": 3,
                               "start_set_downloads": 2}  # fmt: skip


# --- the probe's pieces ---------------------------------------------------------------------


def test_top_level_modules_from_record() -> None:
    record = "\n".join([
        "yaml/__init__.py,sha256=x,1", "_yaml/__init__.py,,", "six.py,sha256=y,2",
        "_cffi_backend.cpython-312-x86_64-linux-gnu.so,sha256=z,3", "PyYAML-6.0.dist-info/RECORD,,",
        "numpy.libs/libgfortran.so,sha256=w,4", "foo-1.0.data/purelib/bar/__init__.py,sha256=v,5",
        "distutils-precedence.pth,sha256=u,6", "README.md,sha256=t,7",
    ])  # fmt: skip
    assert wheels.top_level_modules(record) == {"yaml", "_yaml", "six", "_cffi_backend", "bar"}


def test_shim_fakes_one_h200_and_stubs_named_modules(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import types\ncuda = types.SimpleNamespace(is_available=lambda: False)\n"
        "version = types.SimpleNamespace(cuda=None)\n"
        "def register_fake(op, func=None, /, **kw):\n"
        "    raise RuntimeError(f'operator {op} does not exist')\n"
        "library = types.SimpleNamespace(register_fake=register_fake)\n"
    )
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(probe_code.SHIM)
    code = (
        "import torch\nfrom sgl_kernel.flash import varlen, Base\n"
        "class Mine(Base): pass\n"
        "@varlen\ndef f(): return 7\n"
        "@torch.library.register_fake('sgl_kernel::moe_fused_gate')\ndef g(): return 8\n"
        "try:\n    torch.library.register_fake('other::op', g)\n"
        "except RuntimeError as exc:\n    print(exc)\n"
        "print(torch.cuda.is_available(), torch.cuda.get_device_capability(),"
        " torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).major,"
        " torch.version.cuda, f())"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{shim}:{tmp_path / 'fake'}",
        "SGLANG_PROBE_STUBS": "sgl_kernel",
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "operator other::op does not exist"  # not stubbed
    assert done.stdout.split()[5:] == ["True", "(9,", "0)", "NVIDIA", "H200", "9", "13.0", "7"]


# --- download, manifest, check, install ------------------------------------------------------


def make_wheel(folder: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A real, installable pure-python wheel (zip with METADATA, WHEEL, RECORD)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{p},{digest(t)},{len(t.encode())}\n" for p, t in files.items())
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for p, t in [*files.items(), (f"{info}/RECORD", record + f"{info}/RECORD,,\n")]:
            whl.writestr(p, t)
    return path


def wheelhouse(tmp_path: Path, names: list[str]) -> tuple[dict[str, Any], Path]:
    """A plan whose start set is ``names``, and a fake pip download that copies their wheels."""
    store, out = tmp_path / "store", tmp_path / "house"
    store.mkdir()
    rows = []
    for name in names:
        wheel = make_wheel(store, name)
        rows.append({"name": name, "version": "1.0", "status": "download", "start_set": True,
                     "filename": wheel.name, "sha256": sh.sha256(wheel)})  # fmt: skip
    plan = {
        "sglang": "0.5.17",
        "runner_torch": "2.11.0",
        "python": "3.12",
        "start_set": "s",
        "platforms": ["manylinux_2_28_x86_64"],
        "index": "x",
        "distributions": rows,
    }
    return plan, out


def fake_download(store: Path) -> Any:
    def pip(python: str, args: list[str], index: str) -> subprocess.CompletedProcess[str]:
        dest = Path(args[args.index("-d") + 1])
        for line in Path(args[args.index("-r") + 1]).read_text().splitlines():
            name = line.split("==")[0]
            (dest / f"{name}-1.0-py3-none-any.whl").write_bytes(
                (store / f"{name}-1.0-py3-none-any.whl").read_bytes()
            )
        return subprocess.CompletedProcess(args, 0, "", "")

    return pip


def test_download_writes_the_manifest_and_check_catches_every_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, out = wheelhouse(tmp_path, ["alpha", "beta", "gamma"])
    monkeypatch.setattr(sh, "pip", fake_download(tmp_path / "store"))
    manifest = wh.download(plan, out, False, opts())
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert [f["why"] for f in manifest["files"]] == ["start set"] * 3
    assert {"sglang", "runner_torch", "python", "platforms"} <= set(manifest)
    assert wh.check(out)[1] == []
    (out / "alpha-1.0-py3-none-any.whl").write_bytes(
        b"x" * (out / "alpha-1.0-py3-none-any.whl").stat().st_size
    )
    (out / "beta-1.0-py3-none-any.whl").unlink()
    (out / "gamma-1.0-py3-none-any.whl").write_bytes(b"short")
    make_wheel(out, "stray")
    bad = wh.check(out)[1]
    assert [line.split(":")[0] for line in bad] == [
        "alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl",
        "gamma-1.0-py3-none-any.whl",
        "stray-1.0-py3-none-any.whl"]  # fmt: skip
    assert "sha256" in bad[0] and "missing" in bad[1] and "bytes" in bad[2] and "extra" in bad[3]
    assert cli.main(["check", str(out)]) == 1


def test_a_forks_wheel_built_here_is_copied_into_the_wheelhouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan resolved with --sglang-wheel names the wheel by a file: URL: download copies it
    (checking its sha256) beside what pip downloads; a wheel gone since is an error."""
    plan, out = wheelhouse(tmp_path, ["alpha"])
    (tmp_path / "built").mkdir()
    built = make_wheel(tmp_path / "built", "sglang")
    plan["distributions"].append(
        {"name": "sglang", "version": "1.0", "status": "download", "start_set": True,
         "filename": built.name, "url": built.as_uri(), "sha256": sh.sha256(built)}
    )  # fmt: skip
    monkeypatch.setattr(sh, "pip", fake_download(tmp_path / "store"))
    manifest = wh.download(plan, out, False, opts())
    assert sorted(f["name"] for f in manifest["files"]) == ["alpha", "sglang"]
    assert (out / built.name).read_bytes() == built.read_bytes()
    assert wh.check(out)[1] == []
    assert rs.local_file(built.as_uri()) == built and rs.local_file("https://x/y.whl") is None
    assert rs.wheel_version(Path("sglang-0.0.0.dev0+ddtree.g514ea1f3e-py3-none-any.whl")) == (
        "0.0.0.dev0+ddtree.g514ea1f3e"
    )
    with pytest.raises(sh.UsageError, match="not an SGLang wheel"):
        rs.wheel_version(Path("torch-2.11.0-cp312-cp312-linux_x86_64.whl"))
    built.unlink()
    with pytest.raises(sh.CheckFailed, match="is gone: build the wheel again"):
        wh.download(plan, tmp_path / "again", False, opts())


def test_download_refuses_a_hash_mismatch_and_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, out = wheelhouse(tmp_path, ["alpha"])
    monkeypatch.setattr(sh, "pip", fake_download(tmp_path / "store"))
    plan["distributions"][0]["sha256"] = "0" * 64
    with pytest.raises(sh.CheckFailed, match=r"sha256 \w+ is not the index's 0000"):
        wh.download(plan, out, False, opts())
    assert not (out / "manifest.json").exists()
    plan["distributions"][0].update(name="torch", sha256="1" * 64)
    with pytest.raises(sh.UsageError, match="torch/CUDA"):
        wh.download(plan, out, False, opts())


def test_atomic_write_keeps_the_old_file_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "manifest.json"
    sh.write_atomic(target, "old")

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sh.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        sh.write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_install_for_real_and_the_wrapper_imports_from_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, out = wheelhouse(tmp_path, ["tinypkg"])
    monkeypatch.setattr(sh, "pip", fake_download(tmp_path / "store"))
    wh.download(plan, out, False, opts())
    target = tmp_path / "runner target"  # a space: the wrapper quotes its paths
    argv = [
        "install",
        str(out),
        "--target",
        str(target),
        "--python",
        sys.executable,
        "--smoke",
        "tinypkg",
    ]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    wrapper = target / "bin" / "python"
    assert (
        f"export SPECDEC_SGLANG_PYTHON={wrapper}" in printed
        and "tinypkg 1.0 imports from" in printed
    )
    assert os.access(wrapper, os.X_OK)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "elsewhere")}
    code = "import os, sys, tinypkg; print(tinypkg.__file__); print(os.environ['PYTHONPATH'])"
    done = subprocess.run([str(wrapper), "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    module, pythonpath = done.stdout.splitlines()
    assert Path(module).is_relative_to(target)
    assert pythonpath == f"{target}:{tmp_path / 'elsewhere'}"  # exported for child processes


def test_install_refuses_a_damaged_wheelhouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, out = wheelhouse(tmp_path, ["tinypkg"])
    monkeypatch.setattr(sh, "pip", fake_download(tmp_path / "store"))
    wh.download(plan, out, False, opts())
    make_wheel(out, "stray")
    assert (
        cli.main(["install", str(out), "--target", str(tmp_path / "t"), "--smoke", "tinypkg"]) == 1
    )
    assert not (tmp_path / "t").exists()


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["resolve", "--runner-freeze", str(tmp_path / "none.txt")]) == 2
    assert "none.txt not found" in capsys.readouterr().err
    assert cli.main(["check", str(tmp_path)]) == 2
    assert "manifest.json not found" in capsys.readouterr().err
    (tmp_path / "plan.json").write_text(json.dumps({"sglang": "0.5.17", "start_set": None,
                                                    "distributions": []}))  # fmt: skip
    assert cli.main(["download", str(tmp_path / "plan.json"), "--out", str(tmp_path / "h")]) == 2
    assert "run `sglang-wheelhouse probe" in capsys.readouterr().err


FORK_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "setuptools-rust>=1.10", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
dynamic = ["version"]
dependencies = ["torch==2.11.0"]

[tool.setuptools.packages.find]
include = ["sglang*"]

[tool.setuptools_scm]
root = ".."
fallback_version = "0.0.0.dev0"

[[tool.setuptools-rust.ext-modules]]
target = "sglang.srt.grpc._core"
path = "../rust/sglang-grpc/Cargo.toml"
binding = "PyO3"
"""


def test_a_forks_python_package_is_built_into_a_pure_wheel_of_its_own_version(
    tmp_path: Path,
) -> None:
    """An SGLang tree in git (python/pyproject.toml with SGLang's Rust gRPC extension, whose
    Cargo project is not even there): the wheel is built from the commit asked for, without
    the extension, named as a local version that records the commit."""
    src = tmp_path / "fork"
    (src / "python" / "sglang" / "srt").mkdir(parents=True)
    (src / "python" / "pyproject.toml").write_text(FORK_PYPROJECT)
    (src / "python" / "sglang" / "__init__.py").write_text("")
    (src / "python" / "sglang" / "srt" / "__init__.py").write_text("")
    flag = "--speculative-dflash-enable-ddtree"
    (src / "python" / "sglang" / "srt" / "server_args.py").write_text(f"FLAG = {flag!r}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for args in (["init", "-q", "-b", "feature/ddtree-dev"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(src), *args], check=True, env=env)
    sha = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    script = SCRIPTS / "build-sglang-fork-wheel"
    done = subprocess.run([sys.executable, str(script), str(src), "feature/ddtree-dev",
                           str(tmp_path / "out"), "--label", "ddtree"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "left out: the Rust extension sglang.srt.grpc._core" in done.stdout
    wheel = tmp_path / "out" / f"sglang-0.0.0.dev0+ddtree.g{sha[:9]}-py3-none-any.whl"
    assert f"{wheel} sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}" in done.stdout
    with zipfile.ZipFile(wheel) as zf:
        assert flag in zf.read("sglang/srt/server_args.py").decode()
        assert not [n for n in zf.namelist() if n.endswith((".so", ".pyd"))]
    bad = subprocess.run(
        [sys.executable, str(script), str(src), "no-such-branch", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and "no-such-branch" in bad.stderr  # fmt: skip
