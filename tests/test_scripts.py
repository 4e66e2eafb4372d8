"""Scripts run in an engine's interpreter, and their answers kept while their inputs stay the
same: run here in a real interpreter (this one), each run leaving a line in a file, so that
the test sees which calls ran the script and which were answered from the cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_specdec.engines.scripts import (
    ScriptFailed,
    cache_dir,
    run_script,
    run_script_cached,
    tokenizer_files,
)

# Appends a line to argv[1] each time it runs; prints the JSON of argv[2:] and its stdin.
COUNTING = """
import json, sys
with open(sys.argv[1], "a") as fh:
    fh.write("ran\\n")
if sys.argv[2:] == ["fail"]:
    sys.exit("told to fail")
print(json.dumps({"args": sys.argv[2:], "stdin": sys.stdin.read()}))
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    return tmp_path


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_an_answer_is_reused_until_an_input_changes(cache: Path) -> None:
    log, data = cache / "log", cache / "tokenizer.json"
    data.write_text("{}")

    def ask(*args: str, stdin: str = "x", packages: tuple[str, ...] = ("pytest",)) -> object:
        return run_script_cached(
            sys.executable, COUNTING, [str(log), *args], stdin, packages=packages, files=[data]
        )

    first = ask("a")
    assert first == {"args": ["a"], "stdin": "x"} and runs(log) == 1
    assert ask("a") == first and runs(log) == 1  # answered from the cache
    assert len(list(cache_dir().glob("*.json"))) == 1
    ask("b")  # another argument
    ask("a", stdin="y")  # another input
    ask("a", packages=("pytest", "scipy"))  # another package set
    assert runs(log) == 4
    data.write_text('{"changed": true}')  # a file it reads changed
    ask("a")
    assert runs(log) == 5
    data.unlink()  # and is gone
    ask("a")
    assert runs(log) == 6 and ask("a") and runs(log) == 6


def test_failures_are_never_kept_and_the_cache_can_be_turned_off(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = cache / "log"
    for _ in range(2):
        with pytest.raises(ScriptFailed, match="told to fail"):
            run_script_cached(sys.executable, COUNTING, [str(log), "fail"], packages=())
    assert runs(log) == 2 and not list(cache_dir().glob("*.json"))
    for _ in range(2):  # files None: inputs that cannot be fingerprinted (a hub id)
        run_script_cached(sys.executable, COUNTING, [str(log), "hub"], packages=(), files=None)
    assert runs(log) == 4
    monkeypatch.setenv("SPECDEC_SCRIPT_CACHE", "0")
    for _ in range(2):
        run_script_cached(sys.executable, COUNTING, [str(log), "off"], packages=())
    assert runs(log) == 6 and not list(cache_dir().glob("*.json"))


def test_a_damaged_cache_entry_runs_the_script_again(cache: Path) -> None:
    log = cache / "log"
    run_script_cached(sys.executable, COUNTING, [str(log)], packages=())
    (entry,) = cache_dir().glob("*.json")
    entry.write_text('{"answer": ')  # cut short
    again = run_script_cached(sys.executable, COUNTING, [str(log)], packages=())
    assert again == {"args": [], "stdin": ""} and runs(log) == 2
    assert json.loads(entry.read_text())["answer"] == again  # written whole again


def test_an_interpreter_that_cannot_be_asked_is_an_error_naming_it(cache: Path) -> None:
    missing = str(cache / "no-python")
    with pytest.raises(ScriptFailed, match="no-python"):
        run_script_cached(missing, COUNTING, [], packages=("sglang",))
    with pytest.raises(ScriptFailed, match="no-python"):
        run_script(missing, COUNTING, [])


def test_tokenizer_files_only_for_a_local_folder(tmp_path: Path) -> None:
    assert tokenizer_files("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    files = tokenizer_files(str(tmp_path))
    assert files is not None and tmp_path / "tokenizer_config.json" in files
