"""The code the probe runs in its throwaway virtualenv: ``SHIM``, a ``sitecustomize`` that makes
torch report an H200 and stubs the modules named to it, and ``CHILD``, which imports the
server's modules and reports each failure with its cause.
"""

from __future__ import annotations

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
