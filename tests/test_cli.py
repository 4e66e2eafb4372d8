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


def _write(path: object, doc: dict[str, object]) -> None:
    import json
    from pathlib import Path

    Path(str(path)).write_text(json.dumps({"schema": 1, "finished_at": "x", **doc}))


def test_baseline_update_show_and_compare(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from test_baselines import results_doc

    root = Path(str(tmp_path))
    old = results_doc({"base": {"code": 100, "prose": 80}}, started="a")
    new = results_doc({"base": {"code": 70, "prose": 56}}, seed=3, started="b")
    _write(root / "old.json", old)
    _write(root / "new.json", new)
    assert (
        main(["baseline", "update", str(root / "old.json"), "--baseline-dir", str(root / "bl")])
        == 0
    )
    assert "0 → 1 sessions" in capsys.readouterr().out
    assert main(["baseline", "show", "--baseline-dir", str(root / "bl")]) == 0
    shown = capsys.readouterr().out
    assert "base--m-gguf.json" in shown and "1" in shown
    assert main(["compare", str(root / "old.json"), str(root / "new.json")]) == 1
    assert "base: REGRESSED (provisional): 0.70" in capsys.readouterr().out
    args = ["compare", str(root / "old.json"), str(root / "new.json"), "--provisional", "report"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "base: REGRESSED (provisional): 0.70" in out
    assert "— reported, not gating (--specdec-provisional report)" in out
    assert main(["compare", str(root / "old.json"), str(root / "old.json")]) == 0
    assert main(["report", "markdown", str(root / "new.json")]) == 0
    assert "| `base` |" in capsys.readouterr().out


def test_corrupt_results_file_is_a_clear_error(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "bad.json"
    bad.write_text('{"schema": 1, "configs": [')
    assert main(["baseline", "update", str(bad), "--baseline-dir", str(tmp_path)]) == 2
    assert f"results file {bad} is not valid JSON" in capsys.readouterr().err
    assert bad.read_text() == '{"schema": 1, "configs": ['


def test_doctor_reports_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for part in ("llama.cpp", "SGLang", "vLLM", "NVIDIA GPUs (NVML)", "Docker", "charts"):
        assert part in out


def test_an_output_path_that_cannot_be_written_is_named_exit_2(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from test_baselines import results_doc

    root = Path(str(tmp_path))
    _write(root / "r.json", results_doc({"base": {"code": 100, "prose": 80}}))
    (root / "afile").write_text("x")
    (root / "adir").mkdir()
    cases = {
        "afile": ["report", "benchmark-json", str(root / "r.json"), str(root / "afile" / "o")],
        "adir": ["report", "merge", str(root / "r.json"), "--json", str(root / "adir")],
    }
    for bad, args in cases.items():
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"specdec: error: {root / bad}: ") and err.count("\n") == 1
        assert "check the path" in err
    assert (root / "afile").read_text() == "x" and not any((root / "adir").iterdir())


def test_a_results_file_of_another_shape_is_exit_2_not_a_regression(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from test_baselines import results_doc

    root = Path(str(tmp_path))
    good = results_doc({"base": {"code": 100, "prose": 80}})
    _write(root / "good.json", good)
    _write(root / "bad.json", {**good, "configs": [{"name": "base", "runs": 5}]})
    assert main(["compare", str(root / "good.json"), str(root / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert f"results file {root / 'bad.json'}: configs[0] (base): 'runs' must be a list" in err
