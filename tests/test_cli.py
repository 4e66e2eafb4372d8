from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_specdec.cli import main


def test_configs_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configs", "list", "--engine", "sglang"]) == 0
    listed = capsys.readouterr().out
    assert "sglang:ddtree-b15" in listed and "llamacpp:" not in listed
    assert main(["configs", "show", "sglang:ddtree-b16"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["env"] == {"SGLANG_DDTREE_MAX_TOPK": "16"}


def test_unknown_config_is_exit_2_with_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configs", "show", "nope", "--engine", "vllm"]) == 2
    assert "valid names: baseline, dflash-b16, eagle3, ngram" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_specdec.cli", "configs", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "llamacpp:draft-d16" in proc.stdout


@pytest.mark.engine
def test_configs_lint_rejects_a_misspelled_llamacpp_flag(
    llama_server: object, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "typo.toml"
    path.write_text('[configs.typo]\nengine = "llamacpp"\nargs = ["--spec-draft-n-maxx", "3"]\n')
    assert main(["configs", "lint", "typo", "--config-file", str(path)]) == 1
    out = capsys.readouterr().out
    assert (
        "--spec-draft-n-maxx: unknown to the installed engine; did you mean --spec-draft-n-max?"
        in out
    )
    assert main(["configs", "lint", "draft-d16"]) == 0
