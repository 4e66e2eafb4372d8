"""Fault tolerance: what a run does when the engine, the server, the files or the GPU fail.

Each test injects one fault and checks the promise that docs/reliability.md lists for it: a
fast error that names the cause, a failed run recorded as an error (never a number, never a
hang), files left intact, no engine process left behind, no secret written anywhere.

The ``engine`` tests boot the real CPU ``llama-server`` (short runs: one run of 16 tokens per
prompt where the fault allows it); the others use :class:`fault_server.FaultServer`, the fake
NVML of ``fake_nvml``, or the modules directly.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpcore
import httpx
import pytest
from fake_nvml import FakeNvml
from fault_server import FaultServer, accepts_connections, cmdline, engine_pids, parent_pid

import pytest_specdec.driver.boot as boot_module
import pytest_specdec.driver.plan as plan_module
import pytest_specdec.engines.launch as launch_module
import pytest_specdec.gpu.nvml as gpu_module
from pytest_specdec.core.configs import Registry, preset_configs
from pytest_specdec.core.joins import merge_worker_results
from pytest_specdec.core.results import ResultsError, load_results
from pytest_specdec.core.suitefile import load_suite_settings
from pytest_specdec.core.workers import short_test
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings
from pytest_specdec.engines.launch import (
    ENGINE_MARKER,
    LaunchError,
    engines_started_here,
    exit_seen,
    free_port,
    group_members,
    start_process,
    stop_process,
    wait_ready,
)
from pytest_specdec.engines.llamacpp import LlamaCppEngine
from pytest_specdec.gpu.monitor import GpuMonitor, GpuSettings
from pytest_specdec.gpu.nvml import NvmlLoader
from pytest_specdec.verdict.baselines import append_session

REPO = Path(__file__).resolve().parent.parent
THROUGHPUT = "suites/test_throughput.py"
QUIET = ("-p", "no:cacheprovider")
SMALL = ("--specdec-max-tokens", "16", "--specdec-runs", "1", "--specdec-no-warmup", *QUIET)
# Two prompts: one to finish, one to be in flight when the fault hits; short outputs, so that
# the tier keeps its pace on two shared cores.
TWO_PROMPTS = ("-k", "arithmetic or haiku", "--specdec-max-tokens", "16", "--specdec-no-warmup",
               *QUIET)  # fmt: skip
ONE_PROMPT = '{"id": "haiku", "category": "creative", "prompt": "Write a haiku about the sea."}\n'
T = TypeVar("T")


def _wait_for(check: Callable[[], T], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(0.05)


def _measured(path: Path, config: str) -> list[dict[str, Any]]:
    """The measured runs of ``config`` in a results file; [] while there are none yet."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [
        r
        for c in doc.get("configs", [])
        if c["name"] == config
        for r in c["runs"]
        if r["phase"] == "measure"
    ]


def _config(path: Path, name: str) -> dict[str, Any]:
    return next(c for c in load_results(path)["configs"] if c["name"] == name)


def _gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(Path(f"/proc/{p}/cmdline").exists() and cmdline(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _port_of(pid: int) -> int | None:
    """The engine's ``--port``; None once the process is gone."""
    argv = cmdline(pid).split()
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else None


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except (httpx.HTTPError, httpcore.TimeoutException, httpcore.NetworkError):
        # once, on a loaded machine, a read timeout of the listener that never answers came
        # through as httpcore's own exception rather than httpx's
        return False


def _engine_runner(tmp_path: Path, model: Path, **options: Any) -> Runner:
    """The runner the plugin builds, in this process, booting the real llama-server."""
    opts = RunSettings(
        engine="llamacpp", runs=1, max_tokens=16, warmup=False, model=str(model),
        results_path=tmp_path / "r.json", log_dir=tmp_path / "logs", **options,
    )  # fmt: skip
    suite = load_suite_settings(REPO / "suites" / "specdec.toml")
    return Runner(opts, Registry(preset_configs()), suite, load_workload("seed"))


# --- 1. the engine exits during start-up ------------------------------------------------------
# An invalid flag and a missing --specdec-model file: tests/test_engine_llamacpp.py
# (test_invalid_engine_flag_fails_fast_with_engine_error, test_missing_model_file_is_a_clear_error).


def test_an_engine_that_exits_before_ready_takes_its_workers_and_hides_its_secrets(
    tmp_path: Path,
) -> None:
    """An engine whose main process dies during its boot leaves a worker of its own behind
    (SGLang's scheduler): the failed boot stops the whole group, so the next config boots on a
    free machine. Its log is private (an engine may log its API key, as SGLang does), and a
    server's failure text hides the key in the log tail."""
    from pytest_specdec.driver.boot import Server

    argv = ["sh", "-c", "sleep 60 & echo \"server_args=ServerArgs(api_key='sk-9f3e2a')\"; exit 3"]
    proc = start_process(argv, {}, tmp_path / "engine.log")
    with pytest.raises(LaunchError, match="engine exited with code 3 before it was ready"):
        wait_ready(proc, lambda: False, timeout_s=30)
    deadline = time.monotonic() + 10
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(proc.pid) == []  # its sleeping worker stopped with it
    assert (tmp_path / "engine.log").stat().st_mode & 0o777 == 0o600
    server = Server(None, None, "", None, None, process=proc, secrets=("sk-9f3e2a",))  # type: ignore[arg-type]
    said = server.died("engine exited with code 3")
    assert "api_key='***'" in said and "sk-9f3e2a" not in said


def test_a_lost_connection_waits_a_moment_for_the_engines_exit(tmp_path: Path) -> None:
    """A killed engine's socket closes a moment before its exit can be read, so a request that
    lost its connection reads the exit again for a moment (a run that read "cannot connect"
    alone hid the engine's death). Any other failure reads it once: a live engine answering
    errors costs no wait."""
    from pytest_specdec.driver.boot import Server

    proc = start_process(["sleep", "30"], {}, tmp_path / "engine.log")
    server = Server(None, None, "", None, None, process=proc)  # type: ignore[arg-type]
    try:
        assert server.exit_code(["HTTP 500: the engine said no"]) is None
        assert exit_seen(proc, grace_s=0.05) is None  # alive: no exit within the grace
        os.kill(proc.pid, signal.SIGKILL)
        lost = "client 3 haiku: cannot connect: [Errno 111] Connection refused"
        assert server.exit_code([lost]) == -signal.SIGKILL
    finally:
        stop_process(proc, 0)


def test_a_readiness_timeout_names_the_setting_that_raises_it(tmp_path: Path) -> None:
    proc = start_process(["sleep", "30"], {}, tmp_path / "engine.log")
    said = r"raise startup_timeout_s in the suite file's \[engines.<engine>\] table, or pass"
    with pytest.raises(LaunchError, match=said + " --specdec-startup-timeout SECONDS"):
        wait_ready(proc, lambda: False, timeout_s=0.3)
    assert group_members(proc.pid) == []


def test_only_an_engines_bind_error_is_a_port_clash() -> None:
    """SGLang logs its server_args at every start, with "bind" and "port" in them: an early
    crash (out of GPU memory) is no port clash to boot again on another port."""
    from pytest_specdec.driver.boot import port_clash

    crash = ("server_args=ServerArgs(host='127.0.0.1', port=30000, decoupled_spec_bind_endpoint="
             "None)\ntorch.OutOfMemoryError: CUDA out of memory")  # fmt: skip
    assert not port_clash(crash)
    assert port_clash("couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080")
    assert port_clash("[Errno 98] error while attempting to bind on address ('127.0.0.1', "
                      "30000): address already in use")  # fmt: skip


@pytest.mark.engine
def test_port_taken_fails_fast_with_the_bind_error(
    llama_server: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv = [str(llama_server), "-m", str(models["target"]), "--host", "127.0.0.1",
                "--port", str(port), "-t", "1"]  # fmt: skip
        proc = start_process(argv, {}, tmp_path / "engine.log")
        start = time.monotonic()
        with pytest.raises(LaunchError) as info:
            wait_ready(proc, lambda: _healthy(port), timeout_s=120)
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert "engine exited with code" in message and "before it was ready" in message
    assert re.search(r"bind|address", message.split("(tail) ---", 1)[1]), message
    assert elapsed < 30, f"took {elapsed:.0f} s: must not wait for the 120 s readiness timeout"
    assert engine_pids(tmp_path) == []


def _offer_first(monkeypatch: pytest.MonkeyPatch, port: int) -> list[int]:
    """Make the runner's first free-port pick ``port`` (as if it was taken after the pick)."""
    offered: list[int] = []

    def pick(host: str = "127.0.0.1", offsets: Sequence[int] = ()) -> int:
        offered.append(free_port(host, offsets) if offered else port)
        return offered[-1]

    for module in (plan_module, boot_module):  # the plan's port, and a boot's new one
        monkeypatch.setattr(module, "free_port", pick)
    return offered


def _os_picks(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """Make every port the OS picks (a bind to port 0) come out as ``port``."""
    real = launch_module._bind
    monkeypatch.setattr(launch_module, "_bind", lambda at, p: port if p == 0 else real(at, p))


def test_free_port_leaves_room_for_the_ports_an_engine_derives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _os_picks(monkeypatch, 61234)  # an OS ephemeral port: +10000 would be 71234
    for _ in range(20):
        port = free_port("127.0.0.1", (10000,))
        assert 1024 <= port <= 55535
        with socket.socket() as derived:  # the derived port was free when picked
            derived.bind(("127.0.0.1", port + 10000))
    assert free_port("127.0.0.1") == 61234  # no offsets: the OS's pick stands


def test_free_port_skips_a_port_whose_derived_port_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        _os_picks(monkeypatch, held - 7)  # fits below 65535, but its port + 7 is taken
        port = free_port("127.0.0.1", (7,))
        assert port != held - 7 and port + 7 != held


def test_free_port_names_offsets_that_leave_no_port() -> None:
    with pytest.raises(ValueError, match=r"port offsets \[65000\] leave no port"):
        free_port("127.0.0.1", (65000,))
    with pytest.raises(ValueError, match=r"port offsets \[-5\]: each must be 1 or more"):
        free_port("127.0.0.1", (-5,))


def test_free_port_names_a_host_it_cannot_bind_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"cannot bind on (host '192\.0\.2\.1'|192\.0\.2\.1)"):
        free_port("192.0.2.1", (10000,))  # TEST-NET-1: never this machine's
    assert time.monotonic() - start < 5


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_free_port_binds_an_ipv6_host() -> None:
    try:
        port = free_port("::1", (10000,))
    except LaunchError as exc:  # IPv6 compiled in but no loopback address configured
        pytest.skip(f"no IPv6 loopback here: {exc}")
    assert 1024 <= port <= 55535
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", port + 10000))


@pytest.mark.engine
def test_runner_boots_an_engine_whose_derived_port_must_stay_below_65536(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the DDTree SGLang build, which refuses to start when --port + 10000 > 65535."""
    _os_picks(monkeypatch, 64999)
    monkeypatch.setattr(LlamaCppEngine, "port_offsets", (10000,))
    runner = _engine_runner(tmp_path, models["target"], request_timeout_s=60)
    try:
        server = runner.boot(runner.configs[0])
        try:
            port = int(server.base_url.rsplit(":", 1)[1])
            assert port <= 55535 and _healthy(port)
        finally:
            runner.stop(server)
    finally:
        runner.close()
    assert engine_pids(tmp_path) == []


@pytest.mark.engine
def test_runner_boots_on_another_port_when_a_silent_listener_holds_its_port(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as holder:  # accepts connections, never answers (a hung process)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        offered = _offer_first(monkeypatch, taken)
        runner = _engine_runner(tmp_path, models["target"], request_timeout_s=60)
        start = time.monotonic()
        try:
            server = runner.boot(runner.configs[0])
            elapsed = time.monotonic() - start
            try:
                assert elapsed < 30, (
                    f"boot took {elapsed:.0f} s: the readiness probe waited on the listener "
                    "holding the port although the engine had exited at once"
                )
                assert offered[-1] != taken and server.base_url.endswith(f":{offered[-1]}")
                assert _healthy(offered[-1])
            finally:
                runner.stop(server)
        finally:
            runner.close()
    clash = (tmp_path / "logs" / f"llamacpp-baseline-{taken}.log").read_text()
    assert "couldn't bind" in clash
    assert engine_pids(tmp_path) == []


@pytest.mark.engine
def test_runner_never_measures_a_foreign_server_holding_its_port(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another HTTP server (say, another run's engine) took the port: it must not be measured
    in place of the engine that failed to bind."""
    with FaultServer("ok") as foreign:
        offered = _offer_first(monkeypatch, int(foreign.url.rsplit(":", 1)[1]))
        runner = _engine_runner(tmp_path, models["target"])
        try:
            try:
                server = runner.boot(runner.configs[0])
            except LaunchError as exc:  # refusing is fine too, if it says why
                assert re.search(r"bind|address", str(exc)), str(exc)
            else:
                try:
                    runner.measure(server, runner.workload.prompts[-1])
                finally:
                    runner.stop(server)
                assert server.base_url != foreign.url, f"measured {foreign.url}, not the engine"
        finally:
            runner.close()
        assert foreign.chats == 0, f"the foreign server on port {offered[0]} was measured"
    assert engine_pids(tmp_path) == []


def test_missing_model_file_named_by_the_config_fails_before_booting(
    suite_project: pytest.Pytester, llama_server: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "gone" / "target.gguf"
    extra = suite_project.makefile(
        ".toml", extra=f'[configs.mine]\nengine = "llamacpp"\nmodel = "{missing}"\n'
    )
    start = time.monotonic()
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--specdec-config-file", str(extra), "--spec-config", "mine",
        "-k", "haiku", *SMALL, timeout=120,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*[[]mine[]] target model {missing} does not exist*"])
    assert time.monotonic() - start < 60
    assert not (suite_project.path / "logs").exists()  # nothing was started


@pytest.mark.engine
def test_corrupt_model_file_named_by_the_config_fails_fast_with_the_log_tail(
    suite_project: pytest.Pytester, models: dict[str, Path], tmp_path: Path
) -> None:
    junk = tmp_path / "junk.gguf"
    with models["target"].open("rb") as src:
        junk.write_bytes(src.read(4096))  # a truncated download
    extra = suite_project.makefile(
        ".toml", extra=f'[configs.junk]\nengine = "llamacpp"\nmodel = "{junk}"\n'
    )
    start = time.monotonic()
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--specdec-config-file", str(extra), "--spec-config", "junk",
        "-k", "haiku or verdict", *SMALL, timeout=300,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*[[]junk[]] engine exited with code * before it was ready*", "*engine log*(tail)*"]
    )
    assert re.search(r"failed to (load|read)", result.stdout.str()), result.stdout.str()
    assert elapsed < 90, f"took {elapsed:.0f} s: the failure must not wait for the timeout"
    config = _config(suite_project.path / "results/latest.json", "junk")
    assert "engine exited" in config["error"]
    # the verdict test fails with the boot's error; the failed boot's time is on the record
    result.assert_outcomes(failed=1, errors=1)  # the prompt: at its boot; the verdict
    result.stdout.fnmatch_lines(["*junk: nothing measured to judge: engine exited with code *"])
    (cost,) = config["extra"]["cost"]
    assert cost["failed"] is True and cost["total_s"] > 0


# --- 2. the engine is killed mid-measurement --------------------------------------------------


KILL_AT_SECOND_PROMPT = """
import os
import signal

import pytest

from pytest_specdec.engines.launch import engines_started_here


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    # as baseline's second prompt starts: its engine, the only one up, is killed
    if item.name == "test_throughput[baseline-haiku]":
        for pid in engines_started_here("llama-server"):
            os.kill(pid, signal.SIGKILL)
"""


@pytest.mark.engine
def test_engine_killed_mid_measurement_fails_its_config_and_the_next_one_runs(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    """The engine is killed when baseline's second prompt starts (a conftest hook of the run,
    so the moment does not depend on how fast the machine measures the first)."""
    out = suite_project.path / "r.json"
    suite_project.makeconftest(KILL_AT_SECOND_PROMPT)
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--spec-config", "baseline,ngram", "--specdec-results", str(out),
        *TWO_PROMPTS, "--specdec-runs", "3", timeout=540,
    )  # fmt: skip
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    # baseline: the first prompt measured, the second started when the engine died; ngram: all
    result.assert_outcomes(passed=3, failed=1)
    # The failure names the cause (the engine died, with its exit status) and its log tail.
    failures = text.split("= FAILURES =", 1)[1]
    assert re.search(r"exited with code -9|SIGKILL|killed by signal", failures), failures
    assert "engine log" in failures, failures

    base, ngram = _config(out, "baseline"), _config(out, "ngram")
    done = [r for r in base["runs"] if r["ok"]]
    failed = [r for r in base["runs"] if not r["ok"]]
    assert done and all(r["tok_per_s"] > 0 for r in done)
    assert failed and all(r["error"] and r["tok_per_s"] is None for r in failed)
    assert base["extra"]["exit_code"] == -signal.SIGKILL
    assert len(ngram["runs"]) == 6 and all(r["ok"] and r["tok_per_s"] > 0 for r in ngram["runs"])
    assert engine_pids(suite_project.path) == []


@pytest.mark.engine
def test_engines_started_here_finds_this_runs_engine_and_not_another_suites(
    llama_server: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    """The orphan checks of tests/test_engine_llamacpp.py rely on it. Another suite's engine
    of the same model on the same host (a shared CI runner) is not counted as ours."""
    port = free_port()
    argv = [str(llama_server), "-m", str(models["target"]), "--host", "127.0.0.1",
            "--port", str(port), "-t", "1"]  # fmt: skip
    other_env = {**os.environ, ENGINE_MARKER: "other-suite/1"}
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", str(models["target"])]
    other = subprocess.Popen(sleeper, env=other_env)  # stands in for the other suite's engine
    proc = start_process(argv, {}, tmp_path / "engine.log")
    try:
        wait_ready(proc, lambda: _healthy(port), 120)
        assert engine_pids(tmp_path) == [proc.pid]
        found = engines_started_here(str(models["target"]))
        assert found == [proc.pid], f"engine {proc.pid} ({' '.join(argv)}): found {found}"
        assert engines_started_here(str(models["target"]), root="other-suite") == [other.pid]
    finally:
        stop_process(proc)
        other.kill()
        other.wait()
    assert engine_pids(tmp_path) == []
    assert engines_started_here(str(models["target"])) == []


# --- 3. pytest interrupted; an xdist worker killed --------------------------------------------


def _sigint_as_in_a_terminal() -> None:  # pragma: no cover - runs in the child
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def _pytest_process(project: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``pytest ARGS`` in ``project`` as a user starts it from a terminal (Ctrl-C delivers
    SIGINT, even where this suite itself runs in the background with SIGINT ignored, which the
    child would inherit); killed on the way out if still up."""
    with (project / "pytest.out").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args], cwd=project, stdout=log, stderr=log,
            preexec_fn=_sigint_as_in_a_terminal,
        )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.engine
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_stops_its_engine_and_keeps_valid_results(
    suite_project: pytest.Pytester, models: dict[str, Path], sig: signal.Signals
) -> None:
    root = suite_project.path
    out = root / "r.json"
    # 10 runs a prompt: the first prompt's runs appear in the results file, and the second
    # prompt's 10 still lie ahead (seconds, on a busy machine more) when the signal is sent.
    args = (THROUGHPUT, "--spec-config", "baseline", "--specdec-results", str(out),
            *TWO_PROMPTS, "--specdec-runs", "10")  # fmt: skip
    with _pytest_process(root, *args) as proc:
        _wait_for(lambda: _measured(out, "baseline"), 400, "measured run")
        pids = engine_pids(root)
        assert len(pids) == 1
        port = _port_of(pids[0])
        assert port is not None
        proc.send_signal(sig)
        code = proc.wait(120)
    output = (root / "pytest.out").read_text()
    assert code == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    assert _gone(pids, 5) and engine_pids(root) == []
    assert not accepts_connections(port)
    doc = load_results(out)
    [cfg] = doc["configs"]
    assert cfg["server_url"] == f"http://127.0.0.1:{port}"
    assert any(r["ok"] and r["tok_per_s"] > 0 for r in cfg["runs"])


@pytest.mark.engine
def test_killed_xdist_worker_takes_its_engine_with_it(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    root = suite_project.path
    # --max-worker-restart 0: pytest-xdist 3.8.0 can hang for good when it replaces a crashed
    # worker under --dist loadgroup (pytest-xdist #1323/#1327); the engine check is the point.
    args = (THROUGHPUT, "-n", "2", "--dist", "loadgroup", "--max-worker-restart", "0",
            "--spec-config", "baseline,ngram", "--specdec-results", str(root / "r.json"),
            *TWO_PROMPTS, "--specdec-runs", "2")  # fmt: skip

    def engine_of_a_worker() -> tuple[int, int] | None:
        for pid in engine_pids(root):
            worker = parent_pid(pid)
            port = _port_of(pid)
            if worker and "sys.stdin.readline" in cmdline(worker) and port and _healthy(port):
                return pid, worker
        return None

    with _pytest_process(root, *args) as proc:
        engine, worker = _wait_for(engine_of_a_worker, 240, "ready engine of an xdist worker")
        os.kill(worker, signal.SIGKILL)
        assert _gone([engine], 10), "the engine outlived its killed worker (PR_SET_PDEATHSIG)"
        code = proc.wait(540)
    output = (root / "pytest.out").read_text()
    assert code == pytest.ExitCode.TESTS_FAILED, output
    assert re.search(r"worker '?gw\d'? crashed|node down", output), output
    assert "worker restarting disabled" in output, output
    assert engine_pids(root) == []
    # the merged file: the lost worker's config marked with the worker and the test, the
    # other worker's config kept whole with its verdict
    doc = load_results(root / "r.json")
    [lost] = doc["lost_workers"]
    assert re.fullmatch(r"gw[01]", lost["worker"]) and lost["error"], lost
    killed = lost["config"]
    [other] = {"baseline", "ngram"} - {killed}
    records = {c["name"]: c for c in doc["configs"]}
    assert records[killed]["error"].startswith(
        f"incomplete: xdist worker {lost['worker']} went down ({lost['error']}) while running "
        f"{short_test(lost['running'])}"
    ), records[killed]["error"]
    assert f"{killed}: ERROR incomplete: xdist worker {lost['worker']}" in output, output
    assert records[other].get("error") is None
    assert len([r for r in records[other]["runs"] if r["phase"] == "measure" and r["ok"]]) == 4
    assert other in {v["config"] for v in doc["verdicts"]}


# --- 4. the server fails a request ------------------------------------------------------------

SERVER_FAULTS = [
    ("http500", r"HTTP 500 from /v1/chat/completions: .*injected failure"),
    ("malformed", r"malformed JSON in stream from /v1/chat/completions"),
    ("shapeless", r"AttributeError: 'str' object has no attribute 'get'"),
    ("cut", r"connection closed by the server mid-response|ended before \[DONE\]"),
    ("zero", r"server reported 0 output tokens"),
    ("stall", r"read timeout: no data for 2\.0 s|request timed out after 2 s"),
]


def _measure_external(project: pytest.Pytester, url: str, out: Path, *extra: str) -> Any:
    return project.runpytest_subprocess(
        THROUGHPUT, "--specdec-server-url", url, "--specdec-engine", "llamacpp",
        "--spec-config", "faulty", "--specdec-request-timeout", "2", "--specdec-results",
        str(out), "--specdec-runs", "2", "--specdec-no-warmup", *QUIET, *extra, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(("fault", "cause"), SERVER_FAULTS, ids=[f for f, _ in SERVER_FAULTS])
def test_server_fault_is_a_failed_run_with_its_cause(
    suite_project: pytest.Pytester, fault: str, cause: str
) -> None:
    out = suite_project.path / "r.json"
    start = time.monotonic()
    with FaultServer(fault, stall_s=60) as server:
        result = _measure_external(suite_project, server.url, out, "-k", "haiku")
        chats = server.chats
    elapsed = time.monotonic() - start
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.re_match_lines([rf".*faulty/haiku run 0: ({cause})"])
    runs = _measured(out, "faulty")
    assert len(runs) == 2 == chats
    for run in runs:
        assert not run["ok"] and re.search(cause, run["error"]), run["error"]
        assert run["tok_per_s"] is None and run["tpot_s"] is None
    assert elapsed < 60, f"took {elapsed:.0f} s"


def _load_external(project: pytest.Pytester, url: str, out: Path, *extra: str) -> Any:
    """Two clients at one load level against ``url``, three rounds of the two-prompt workload."""
    project.makefile(".jsonl", two=ONE_PROMPT + ONE_PROMPT.replace('"haiku"', '"haiku2"'))
    return project.runpytest_subprocess(
        "suites/test_concurrency.py", "--specdec-server-url", url, "--specdec-engine",
        "llamacpp", "--spec-config", "faulty", "--specdec-request-timeout", "2",
        "--specdec-results", str(out), "--specdec-concurrency", "2", "--specdec-rounds", "3",
        "--specdec-workload", "two.jsonl", "--specdec-max-tokens", "16", "--specdec-no-warmup",
        *QUIET, *extra, timeout=120,
    )  # fmt: skip


def _rounds(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    (config,) = [c for c in doc["configs"] if c["name"] == "faulty"]
    return list(config["extra"]["load"])


@pytest.mark.parametrize(
    ("fault", "cause"),
    [("shapeless", "AttributeError: 'str' object has no attribute 'get'"),
     ("stall", "read timeout: no data for 2.0 s|request timed out after 2 s")],
    ids=["shapeless", "stall"],
)  # fmt: skip
def test_a_load_round_with_a_failed_request_fails_its_level_and_stops_it(
    suite_project: pytest.Pytester, fault: str, cause: str
) -> None:
    """A response the adapter cannot read, or an engine that hangs: the round records the
    error, never a number; each client stops at its failed request, the level stops after
    the round, and no client sends anything after the run is done with the level."""
    out = suite_project.path / "r.json"
    start = time.monotonic()
    with FaultServer(fault, stall_s=60) as server:
        result = _load_external(suite_project, server.url, out)
        chats = server.chats
        time.sleep(0.5)
        assert server.chats == chats  # nothing sent once the level is over
    elapsed = time.monotonic() - start
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    (only,) = _rounds(out)  # rounds 2 and 3 not run
    assert only["round"] == 1 and only["output_tok_per_s"] is None
    assert only["requests"] == only["failed"] == 2 == chats  # one request a client
    assert all(re.search(cause, e) for e in only["errors"][:2]), only["errors"]
    assert "the level stopped here: its 2 later round(s) were not run" in only["errors"][2]
    result.stdout.re_match_lines([rf".*round 1: client 0 haiku: ({cause})"])
    assert elapsed < 60, f"took {elapsed:.0f} s"


def test_a_load_request_ended_short_is_an_error_with_ignore_eos_and_a_note_without(
    suite_project: pytest.Pytester,
) -> None:
    """The server ends every request at 8 tokens of the 16 asked. With ignore_eos a round
    measures fixed-length requests, so each is an error naming what it decoded; without it
    the level is measured and its note says the rounds did unequal work."""
    out = suite_project.path / "r.json"
    with FaultServer("ok", tokens=8) as server:
        fixed = _load_external(suite_project, server.url, out, "--specdec-ignore-eos")
    assert fixed.ret == pytest.ExitCode.TESTS_FAILED, fixed.stdout.str()
    (first,) = _rounds(out)
    assert first["errors"][0].endswith(
        "decoded 8 of 16 tokens with ignore_eos (finish_reason None): the engine ended it "
        "early, e.g. at a full context; give each of its slots more context, or lower "
        "--specdec-max-tokens"
    )
    with FaultServer("ok", tokens=8) as server:
        free = _load_external(suite_project, server.url, out)
    assert free.ret == pytest.ExitCode.OK, free.stdout.str()
    rounds = _rounds(out)
    assert len(rounds) == 3 and all(r["engine"]["short_requests"] == 4 for r in rounds)
    free.stdout.fnmatch_lines(
        ["*faulty at 2 clients: 12 of 12 requests ended at EOS before max_tokens, so the rounds "
         "did unequal work; --specdec-ignore-eos (or [[]suite] ignore_eos = true) decodes every "
         "request in full*"]
    )  # fmt: skip


def test_fault_server_control_measures_normally(suite_project: pytest.Pytester) -> None:
    out = suite_project.path / "r.json"
    with FaultServer("ok", tokens=8) as server:
        result = _measure_external(suite_project, server.url, out, "-k", "haiku")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    runs = _measured(out, "faulty")
    assert [r["output_tokens"] for r in runs] == [8, 8]
    assert all(r["ok"] and r["tok_per_s"] > 0 for r in runs)


# --- 5. corrupt files -------------------------------------------------------------------------


def _valid_results() -> str:
    doc = {"schema": 1, "started_at": "t0", "finished_at": "t1", "workload": {}, "configs": [
        {"name": "baseline", "engine": "llamacpp", "config": {}, "runs": []}]}  # fmt: skip
    return json.dumps(doc, indent=2)


RESULTS_DAMAGE = [
    ("truncated", _valid_results()[:60].encode(), "is not valid JSON"),
    ("binary", b"\xff\xfe\x00garbage", "is not valid JSON"),
    ("empty", b"", "is not valid JSON"),
    ("schema-2", _valid_results().replace('"schema": 1', '"schema": 2').encode(), "schema 2"),
    ("array", b"[1, 2]", "schema 'list'"),
    ("configs-not-list", b'{"schema": 1, "configs": {}}', "'configs' must be a list"),
]


@pytest.mark.parametrize(("content", "problem"), [d[1:] for d in RESULTS_DAMAGE],
                         ids=[d[0] for d in RESULTS_DAMAGE])  # fmt: skip
def test_damaged_results_file_names_the_file_and_is_left_alone(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "latest.json"
    path.write_bytes(content)
    with pytest.raises(ResultsError) as info:
        load_results(path)
    assert str(path) in str(info.value) and problem in str(info.value)
    assert path.read_bytes() == content


def test_damaged_worker_results_file_is_named_and_the_merged_file_kept(tmp_path: Path) -> None:
    merged = tmp_path / "r.json"
    merged.write_text(_valid_results())
    before = merged.read_bytes()
    (tmp_path / "r.gw0.json").write_text(_valid_results())
    (tmp_path / "r.gw1.json").write_text(_valid_results()[:100])
    with pytest.raises(ResultsError, match=r"r\.gw1\.json is not valid JSON"):
        merge_worker_results(merged, since=0.0)
    assert merged.read_bytes() == before


CONFIG_DAMAGE = [
    ("broken-toml", "[configs.x\nengine = 'llamacpp'\n", "is not valid TOML"),
    ("truncated", '[configs.x]\nengine = "llama', "is not valid TOML"),
    ("args-not-list", '[configs.x]\nargs = "--spec-type ngram"\n', "'args' must be a list"),
    ("unknown-key", "[configs.x]\nargz = []\n", "unknown key(s) argz"),
    ("configs-not-table", "configs = 3\n", "[configs] must be a table of tables"),
]


@pytest.mark.parametrize(("text", "problem"), [d[1:] for d in CONFIG_DAMAGE],
                         ids=[d[0] for d in CONFIG_DAMAGE])  # fmt: skip
def test_damaged_config_file_is_a_usage_error_naming_it(
    suite_project: pytest.Pytester, text: str, problem: str
) -> None:
    bad = suite_project.path / "extra.toml"
    bad.write_text(text)
    results = suite_project.path / "r.json"
    results.write_text(_valid_results())
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--specdec-config-file", str(bad), "--specdec-results", str(results),
        "--collect-only", *QUIET,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = result.stderr.str()
    assert f"config file {bad}" in error or f"{bad} [configs" in error or f"{bad}:" in error
    assert problem in error, error
    assert results.read_text() == _valid_results() and bad.read_text() == text


@pytest.mark.parametrize("flag", ["--specdec-config-file", "--specdec-suite-file"])
def test_missing_config_file_is_a_usage_error_naming_it(
    suite_project: pytest.Pytester, flag: str
) -> None:
    missing = suite_project.path / "typo.toml"
    result = suite_project.runpytest_subprocess(THROUGHPUT, flag, str(missing), "--co", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*{missing}*does not exist*"])


BASELINE_DAMAGE = [
    ("truncated", lambda text: text[: len(text) // 2], "is not valid JSON"),
    ("schema-2", lambda text: text.replace('"schema": 1', '"schema": 2'), "schema 2 is not 1"),
    (
        "sessions-not-list",
        lambda text: json.dumps({**json.loads(text), "sessions": {}}),
        "'sessions' a list",
    ),
]


@pytest.mark.parametrize(("damage", "problem"), [d[1:] for d in BASELINE_DAMAGE],
                         ids=[d[0] for d in BASELINE_DAMAGE])  # fmt: skip
def test_damaged_baseline_fails_the_verdict_naming_it_and_is_not_overwritten(
    suite_project: pytest.Pytester, damage: Callable[[str], str], problem: str
) -> None:
    """Unit level (every damage, unreadable store): tests/test_baselines.py; here through the
    plugin, with --specdec-update-baselines asking to write the damaged file."""
    workload = suite_project.path / "one.jsonl"
    workload.write_text(ONE_PROMPT)
    out = suite_project.path / "r.json"
    update = ("--specdec-workload", str(workload), "--specdec-update-baselines",
              "--specdec-baseline-dir", str(suite_project.path / "bl"))  # fmt: skip
    with FaultServer("ok") as server:
        first = _measure_external(suite_project, server.url, out, *update)
        assert first.ret == pytest.ExitCode.OK, first.stdout.str()
        [path] = (suite_project.path / "bl").rglob("*.json")
        path.write_text(damage(path.read_text()))
        before = path.read_bytes()
        result = _measure_external(suite_project, server.url, out, *update)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([f"baseline {path}*{problem}*", "*FAILED*test_verdict[[]faulty*"])
    result.stdout.fnmatch_lines([f"verdicts: ERROR baseline {path}*{problem}*"])
    assert path.read_bytes() == before


def test_provisional_regression_fails_by_default_and_is_reported_only_on_request(
    suite_project: pytest.Pytester,
) -> None:
    """A one-session baseline, then a server half as fast: REGRESSED (provisional) fails the
    run unless --specdec-provisional report, which lists it as not gating."""
    workload = suite_project.path / "one.jsonl"
    workload.write_text(ONE_PROMPT)
    out = suite_project.path / "r.json"
    # 6 runs a side, not 2: one slow first request must not leave a 2x change undecided
    common = ("--specdec-workload", str(workload), "--specdec-baseline-dir",
              str(suite_project.path / "bl"), "--specdec-runs", "6")  # fmt: skip
    with FaultServer("ok", tokens=10, token_s=0.01) as server:
        first = _measure_external(suite_project, server.url, out, *common,
                                  "--specdec-update-baselines")  # fmt: skip
        assert first.ret == pytest.ExitCode.OK, first.stdout.str()
        server.token_s = 0.02
        gated = _measure_external(suite_project, server.url, out, *common)
        reported = _measure_external(suite_project, server.url, out, *common,
                                     "--specdec-provisional", "report")  # fmt: skip
    assert gated.ret == pytest.ExitCode.TESTS_FAILED, gated.stdout.str()
    gated.stdout.fnmatch_lines(
        ["*faulty: REGRESSED (provisional): 0.*", "FAILED*test_verdict[[]faulty[]]*"]
    )
    assert "not gating" not in gated.stdout.str()
    assert reported.ret == pytest.ExitCode.OK, reported.stdout.str()
    reported.stdout.fnmatch_lines(
        ["faulty: REGRESSED (provisional): 0.* — reported, not gating (--specdec-provisional*"]
    )


# --- 6. concurrent baseline updates -----------------------------------------------------------
# Threads of one process: tests/test_baselines.py::test_concurrent_writers_keep_every_session.


def _append_many(path: str, writer: int, count: int, start: Any) -> None:
    start.wait(30)
    for i in range(count):
        append_session(Path(path), {"config": "c"}, {"id": f"w{writer}-{i}", "prompts": {}})


def test_two_processes_appending_to_one_baseline_keep_every_session(tmp_path: Path) -> None:
    path = tmp_path / "bl" / "c.json"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_append_many, args=(str(path), w, 20, start)) for w in (0, 1)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    doc = json.loads(path.read_text())
    assert sorted(s["id"] for s in doc["sessions"]) == sorted(
        f"w{w}-{i}" for w in (0, 1) for i in range(20)
    )
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.engine
def test_two_xdist_workers_update_their_baselines(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    workload = suite_project.path / "one.jsonl"
    workload.write_text(ONE_PROMPT)
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "-n", "2", "--dist", "loadgroup", "--spec-config", "baseline,ngram",
        "--specdec-update-baselines", "--specdec-baseline-dir", "bl", "--specdec-workload",
        str(workload), "--specdec-results", "r.json", *SMALL, timeout=540,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    files = sorted((suite_project.path / "bl").rglob("*.json"))
    assert [f.name.split("--")[0] for f in files] == ["baseline", "ngram"]
    for f in files:
        doc = json.loads(f.read_text())
        assert len(doc["sessions"]) == 1 and doc["sessions"][0]["prompts"]["haiku"]["n"] == 1
    assert engine_pids(suite_project.path) == []


# --- 7. the baseline store is read-only or full: tests/test_baselines.py ----------------------
# (test_unwritable_store_keeps_the_previous_baseline)

# --- 8. secrets, bind address, argv -----------------------------------------------------------

AUTH_PROBE = """
import socket
from pathlib import Path

import httpx

from pytest_specdec.driver.runner import Server


def _listening(port: int) -> list[str]:
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            out.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return out


def test_engine_requires_the_key_and_listens_on_loopback(specdec_server: Server) -> None:
    url = specdec_server.base_url
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    chat = url + "/v1/chat/completions"
    assert httpx.post(chat, json=body, timeout=60).status_code == 401
    wrong = {"Authorization": "Bearer wrong"}
    assert httpx.post(chat, json=body, headers=wrong, timeout=60).status_code == 401
    assert _listening(int(url.rsplit(":", 1)[1])) == ["127.0.0.1"]
"""


@pytest.mark.engine
@pytest.mark.parametrize("given", ["flag", "env"])
def test_api_key_is_required_by_the_engine_and_written_nowhere(
    suite_project: pytest.Pytester,
    models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    given: str,
) -> None:
    key = f"sk-specdec-{secrets.token_hex(12)}"
    root = suite_project.path
    (root / "suites" / "test_auth_probe.py").write_text(AUTH_PROBE)
    (root / "one.jsonl").write_text(ONE_PROMPT)
    flag: tuple[str, ...] = ("--specdec-api-key", key) if given == "flag" else ()
    if given == "env":
        monkeypatch.setenv("SPECDEC_API_KEY", key)
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "suites/test_auth_probe.py", "--spec-config", "baseline", *flag,
        "--specdec-workload", "one.jsonl", "--specdec-update-baselines",
        "--specdec-baseline-dir", "bl", "--specdec-results", "r.json",
        "--junitxml", "report.xml", *SMALL, timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2, skipped=1)  # the throughput, the probe; no verdict yet
    cfg = _config(root / "r.json", "baseline")
    assert [r["ok"] and r["tok_per_s"] > 0 for r in cfg["runs"]] == [True]  # the key was sent
    command = cfg["command"]
    assert "--api-key" not in command and cfg["env"]["LLAMA_API_KEY"] == "***"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    written = [p for p in root.rglob("*") if p.is_file()]
    names = {p.suffix for p in written}
    assert {".log", ".xml", ".json"} <= names and list((root / "bl").rglob("*.json"))
    assert [str(p) for p in written if key.encode() in p.read_bytes()] == []
    assert key not in result.stdout.str() and key not in result.stderr.str()


@pytest.mark.engine
def test_api_key_is_not_on_the_engine_command_line(models: dict[str, Path], tmp_path: Path) -> None:
    """``/proc/PID/cmdline`` is readable by every local user (``ps``); the environment is not."""
    key = f"sk-specdec-{secrets.token_hex(12)}"
    runner = _engine_runner(tmp_path, models["target"], api_key=key)
    try:
        server = runner.boot(runner.configs[0])
        try:
            pid = server.process.pid  # type: ignore[union-attr]
            assert key not in cmdline(pid)
        finally:
            runner.stop(server)
    finally:
        runner.close()


@pytest.mark.engine
def test_shell_metacharacters_in_a_config_reach_the_engine_literally(
    suite_project: pytest.Pytester, models: dict[str, Path], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("still here")
    pwned = tmp_path / "pwned"
    evil = [f"; rm -rf {victim}", f"$(touch {pwned})"]
    extra = suite_project.makefile(
        ".toml", extra=f'[configs.evil]\nengine = "llamacpp"\nargs = {json.dumps(evil)}\n'
    )
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--specdec-config-file", str(extra), "--spec-config", "evil",
        "--specdec-results", str(out), "-k", "haiku", *SMALL, timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*invalid argument: {evil[0]}*"])
    assert _config(out, "evil")["command"][-2:] == evil
    assert (victim / "keep").read_text() == "still here" and not pwned.exists()


# --- 9. GPU telemetry lost mid-run ------------------------------------------------------------


def _chat_stream(tokens: int) -> bytes:
    events = [{"choices": [{"delta": {"content": "tok "}}]} for _ in range(tokens)]
    events.append({"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 9}})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def test_gpu_lost_mid_run_keeps_measuring_and_records_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = FakeNvml(n_gpus=1)
    monkeypatch.setattr(gpu_module, "_DEFAULT_LOADER", NvmlLoader(lambda: nvml))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    chats = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        chats[0] += 1
        if chats[0] == 2:  # partway through the second run the GPU falls off the bus
            time.sleep(0.1)
            nvml.gpus[0].fail["nvmlDeviceGetPowerUsage"] = FakeNvml.NVML_ERROR_GPU_IS_LOST
            time.sleep(0.1)
        return httpx.Response(200, content=_chat_stream(8))

    options = RunSettings(
        server_url="http://test", engine="llamacpp", runs=3, warmup=False,
        results_path=tmp_path / "r.json", config_names=("baseline",),
    )  # fmt: skip
    gpu = GpuMonitor(GpuSettings(cooldown=False, hz=50), None, 1)
    runner = Runner(
        options, Registry(preset_configs()), load_suite_settings(None), load_workload("seed"),
        httpx.MockTransport(handler), gpu=gpu,
    )  # fmt: skip
    try:
        runs = runner.measure(runner.boot(runner.configs[0]), runner.workload.prompts[0])
    finally:
        runner.close()
    assert len(runs) == 3 and all(r.ok and r.tok_per_s and not r.invalid for r in runs)
    recorded = _measured(tmp_path / "r.json", "baseline")
    healthy, lost, after = (r["gpu"] for r in recorded)
    assert not healthy["telemetry_lost"] and healthy["devices"][0]["lost_at_s"] is None
    dev = lost["devices"][0]
    assert lost["telemetry_lost"] and "GPU is lost" in dev["lost_reason"]
    assert 0.05 < dev["lost_at_s"] <= lost["duration_s"] and dev["samples"] >= 2
    assert after["telemetry_lost"] and after["devices"][0]["samples"] == 0
    assert after["energy_j"] is None and after["devices"][0]["power_w"] is None


def test_a_stop_returns_once_every_process_of_the_engine_is_gone(tmp_path: Path) -> None:
    """SGLang's scheduler and detokenizer outlive its main process by seconds and hold the
    GPU until they exit: the stop waits for the whole process group, not just its leader."""
    worker = "trap '' TERM; sleep 60"  # a child that ignores SIGTERM, as a busy worker may
    proc = start_process(
        ["bash", "-c", f'bash -c "{worker}" & exec sleep 60'], {}, tmp_path / "engine.log"
    )
    deadline = time.monotonic() + 5
    while len(group_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(proc.pid)) == 2  # the leader and its worker
    stop_process(proc, grace_s=2)
    assert group_members(proc.pid) == []


def test_an_unknown_same_machine_mode_is_a_usage_error_naming_the_modes(
    suite_project: pytest.Pytester,
) -> None:
    result = suite_project.runpytest_subprocess(
        THROUGHPUT, "--specdec-same-machine", "sometimes", "--collect-only", *QUIET
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = result.stderr.str()
    assert "--specdec-same-machine: invalid choice: 'sometimes'" in error, error
    assert all(mode in error.split("invalid choice")[1] for mode in ("auto", "always", "never"))
