"""``specdec doctor``: what this machine has for pytest-specdec, each line with a fix."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from pytest_specdec.core.engine_table import BUILTIN, ENGINE_TABLE, EngineLoadError
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.engines import EngineNotInstalled, make_engine
from pytest_specdec.gpu.nvml import fingerprints, load_nvml, probe

Check = Callable[[], tuple[bool, str]]


LABELS = {"llamacpp": "llama.cpp", "sglang": "SGLang", "vllm": "vLLM", "openai": "OpenAI API"}


def _engine(name: str, suite: SuiteSettings) -> Check:
    """An engine: does its adapter import, and is the engine itself installed. An adapter of
    another distribution says where it came from."""

    def check() -> tuple[bool, str]:
        try:
            engine = make_engine(name, suite.engine_settings(name))
        except EngineLoadError as exc:
            return False, str(exc)
        origin = "" if name in BUILTIN else f" (adapter: {ENGINE_TABLE.source(name)})"
        try:
            engine.check_installed()
        except EngineNotInstalled as exc:
            return False, f"{exc}{origin}"
        if name == "openai":
            return True, "measures a server someone else started (--specdec-server-url)"
        return True, f"{engine.version() or 'installed (version unknown)'}{origin}"

    return check


def _gpus() -> tuple[bool, str]:
    ok, reason = probe()
    if not ok:
        return False, f"{reason}; telemetry will be null (install a driver and nvidia-ml-py)"
    count = int(load_nvml().nvmlDeviceGetCount())
    names = [
        f"{f.index}: {f.name} ({f.uuid}, driver {f.driver_version})"
        for f in fingerprints(list(range(count)))
    ]
    return True, "; ".join(names)


def _docker() -> tuple[bool, str]:
    if importlib.util.find_spec("docker") is None:
        return False, "the docker SDK is missing: pip install 'pytest-specdec[docker]'"
    try:
        from pytest_specdec.engines.container import docker_client

        version = docker_client().version().get("Version", "?")
    except Exception as exc:
        return False, f"{exc}".splitlines()[0]
    return (
        True,
        f"daemon {version} at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}",
    )


def _module(name: str, extra: str) -> Check:
    def check() -> tuple[bool, str]:
        if importlib.util.find_spec(name) is None:
            return False, f"{name} missing: pip install 'pytest-specdec[{extra}]'"
        return True, "importable"

    return check


def run(suite: SuiteSettings) -> int:
    checks: list[tuple[str, Check]] = [
        (LABELS.get(name, f"engine {name}"), _engine(name, suite)) for name in ENGINE_TABLE.names()
    ]
    checks += [
        ("NVIDIA GPUs (NVML)", _gpus),
        ("Docker", _docker),
        ("charts (matplotlib)", _module("matplotlib", "plot")),
    ]
    for label, check in checks:
        ok, text = check()
        print(f"{'ok ' if ok else 'no '} {label:22} {text}")
    return 0
