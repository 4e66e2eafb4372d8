"""The ``specdec`` command's guards: a report never writes over its input, ``compare`` says
when it cannot judge, ``report merge`` counts a run once, and bad input is a named error,
never a traceback."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_baselines import results_doc

from pytest_specdec.cli import main
from pytest_specdec.core.results import atomic_write_json


def _results(path: Path, doc: dict[str, Any] | None = None) -> Path:
    doc = doc or results_doc({"base": {"code": 100, "prose": 80}})
    atomic_write_json(path, {"schema": 1, "finished_at": "x", **doc})
    return path


def test_a_report_never_writes_over_its_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trend BASELINES... OUT.png`` takes its last path as the chart: forgetting it used to
    write a PNG over the last baseline; ``chart R R`` and ``benchmark-json R R`` replaced
    the results. Each is refused before anything is read, the files unchanged."""
    results = _results(tmp_path / "r.json")
    other = _results(tmp_path / "other.json")
    assert main(["baseline", "update", str(results), "--baseline-dir", str(tmp_path / "bl")]) == 0
    (baseline,) = (tmp_path / "bl").rglob("*.json")
    kept = {p: p.read_bytes() for p in (results, other, baseline)}
    capsys.readouterr()
    cases = {
        ("trend", str(baseline), str(baseline)): "is not named .png",
        ("trend", str(tmp_path / "bl")): "report trend takes BASELINES... OUT.png, got 1 path",
        ("chart", str(results), str(results)): "is not named .png",
        ("chart", str(results)): "report chart takes RESULTS OUT.png, got 1 path",
        ("chart", str(results), str(tmp_path / "c.svg")): "writes a PNG chart",
        ("benchmark-json", str(results), str(results)): "would write over its input",
        ("benchmark-json", str(results), str(other)): "which holds a run's results",
        ("benchmark-json", str(results)): "name the file to write last",
        ("markdown", str(results), str(other)): "report markdown takes RESULTS, got 2",
    }
    for args, message in cases.items():
        assert main(["report", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("specdec: error: report ") and message in err, (args, err)
    assert {p: p.read_bytes() for p in kept} == kept
    assert not (tmp_path / "c.svg").exists()


def test_compare_names_a_config_that_failed_or_is_missing_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config whose server did not boot in NEW used to read "load levels only" and pass;
    it is an error of the comparison now, and a config of OLD that NEW lacks is named."""
    old_doc = results_doc({"base": {"code": 100}, "other": {"code": 90}})
    old = _results(tmp_path / "old.json", old_doc)
    crashed = copy.deepcopy(old_doc)
    crashed["configs"] = [c for c in crashed["configs"] if c["name"] == "base"]
    crashed["configs"][0].update(runs=[], error="engine exited with code -9 before ready")
    new = _results(tmp_path / "new.json", crashed)
    assert main(["compare", str(old), str(new), "--provisional", "report"]) == 1
    out = capsys.readouterr().out
    assert "base: ERROR: it failed in" in out and "exited with code -9" in out
    assert "load levels only" not in out and f"not in {new}: other" in out
    empty = copy.deepcopy(old_doc)
    empty["configs"] = []
    assert main(["compare", str(old), str(_results(tmp_path / "empty.json", empty))]) == 2
    assert "nothing to compare" in capsys.readouterr().err


def test_compare_says_when_the_two_runs_are_different_setups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_doc = results_doc({"base": {"code": 100}})
    other = copy.deepcopy(old_doc)
    other["configs"][0]["engine"] = "sglang"
    other["options"]["max_tokens"] = 7
    old = _results(tmp_path / "old.json", old_doc)
    main(["compare", str(old), str(_results(tmp_path / "new.json", other))])
    out = capsys.readouterr().out
    assert "base: note: OLD and NEW ran different setups (engine: 'llamacpp' → 'sglang'" in out
    assert "max_tokens" in out
    main(["compare", str(old), str(old)])
    assert "different setups" not in capsys.readouterr().out


def test_compare_judges_each_config_against_a_named_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reference NAME``: every other config of NEW against OLD's NAME, one file on both
    sides (the H100 fork run: DDTree against the chain on its settings, level by level, and
    where the tree stops being the faster); a name OLD lacks, or a reference that failed, is
    an error naming the fix."""
    run = Path(__file__).parent.parent / "docs/gpu-run/ddtree-load/h100-ddtree-load.json.gz"
    assert main(["compare", str(run), str(run), "--reference", "dflash-b16-triton"]) == 0
    out = capsys.readouterr().out
    assert "ddtree-b15: 1 client: IMPROVED (provisional): 1.188x" in out
    assert "ddtree-b15: crossover (tonight): stops being faster at about 5.7 clients" in out
    assert "dflash-b16-triton:" not in out.replace("against dflash-b16-triton", "")
    assert "different setups" not in out
    assert main(["compare", str(run), str(run), "--reference", "dflash-b16"]) == 2
    err = capsys.readouterr().err
    assert "--reference dflash-b16: no such config in" in err
    assert "(it has dflash-b16-triton, ddtree-b15); name one of those" in err
    old_doc = results_doc({"base": {"code": 100}, "other": {"code": 90}})
    old_doc["configs"][0]["error"] = "engine exited with code -9 before ready"
    old = _results(tmp_path / "old.json", old_doc)
    assert main(["compare", str(old), str(old), "--reference", "base"]) == 2
    assert "--reference base: it failed in" in capsys.readouterr().err
    alone = _results(tmp_path / "alone.json", results_doc({"base": {"code": 100}}))
    assert main(["compare", str(alone), str(alone), "--reference", "base"]) == 2
    assert "has no config besides the reference base (base)" in capsys.readouterr().err


def test_compare_against_a_reference_from_another_setup_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reference`` across two files: the reference from a run of another output length
    (or machine) is noted, since the ratio then mixes the setup into the speedup; the config's
    own differences from the reference (name, flags) are not."""
    doc = results_doc({"base": {"code": 100}, "spec": {"code": 130}})
    old = _results(tmp_path / "old.json", doc)
    same = _results(tmp_path / "same.json", copy.deepcopy(doc))
    assert main(["compare", str(old), str(same), "--reference", "base"]) == 0
    assert "different setups" not in capsys.readouterr().out
    longer = copy.deepcopy(doc)
    longer["options"]["max_tokens"] = 7
    main(["compare", str(old), str(_results(tmp_path / "new.json", longer)), "--reference", "base"])
    out = capsys.readouterr().out
    assert "spec: note: OLD and NEW ran different setups (max_tokens:" in out
    assert "compares base on one setup with this config on another" in out
    assert "config:" not in out


@pytest.mark.parametrize("flag, value", [("--alpha", "0.6"), ("--alpha", "0"),
                                         ("--min-delta", "2"), ("--min-delta", "-1")])  # fmt: skip
def test_compare_policy_values_out_of_range_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    results = _results(tmp_path / "r.json")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(results), str(results), flag, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: '{value}'" in err and "Traceback" not in err


def test_merge_counts_a_run_given_twice_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same results file named twice, or a copy in another runner's folder, used to be
    joined as a second server session: every CI narrowed by about 1/sqrt(2)."""
    results = _results(tmp_path / "a" / "results.json")
    _results(tmp_path / "b" / "results.json", json.loads(results.read_text()))
    assert main(["report", "merge", str(results), "--json", str(tmp_path / "once.json")]) == 0
    once = capsys.readouterr().out
    for args in ([str(results), str(results)], [str(tmp_path)]):
        assert main(["report", "merge", *args, "--json", str(tmp_path / "m.json")]) == 0
        out = capsys.readouterr().out
        assert "a run is counted once" in out
        merged, single = (json.loads((tmp_path / n).read_text()) for n in ("m.json", "once.json"))
        assert merged["groups"] == single["groups"]
    assert "a run is counted once" not in once


def test_bad_text_and_unknown_engines_are_named_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[configs]\n")
    assert main(["configs", "list", "--config-file", str(bad)]) == 2
    assert f"config file {bad} is not UTF-8 text" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert main(["configs", "list", "--engine", "foo"]) == 2
    err = capsys.readouterr().err
    assert "no configs for engine 'foo' (unknown; engines: llamacpp" in err


def test_a_reader_that_stops_early_is_no_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``specdec ... | head``: the pipe closes under the command; it stops quietly with
    128 + SIGPIPE, as a shell tool does, not with ``error: [Errno 32] Broken pipe``."""
    cli = importlib.import_module("pytest_specdec.cli.main")

    def closed(args: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_configs_list", closed)
    assert cli.main(["configs", "list"]) == 141
    assert "Broken pipe" not in capsys.readouterr().err


def test_a_baseline_with_values_of_the_wrong_kind_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the keys of a stored cell used to be checked: ``mean_log: "x"`` or ``runs: [0]``
    crashed the verdicts (a run's end) with a bare ValueError that named no file."""
    from pytest_specdec.verdict.baselines import BaselineError, load_baseline

    results = _results(tmp_path / "r.json")
    assert main(["baseline", "update", str(results), "--baseline-dir", str(tmp_path / "bl")]) == 0
    (path,) = (tmp_path / "bl").rglob("*.json")
    good = json.loads(path.read_text())
    load_baseline(path)
    damage = {"mean_log": "x", "n": 0, "sd_log": -1.0, "runs": [0.0, 1.0, 2.0, 3.0, 4.0]}
    for field, value in damage.items():
        doc = copy.deepcopy(good)
        doc["sessions"][0]["prompts"]["code"][field] = value
        path.write_text(json.dumps(doc))
        with pytest.raises(BaselineError, match=rf"baseline {path}: .*a valid {field} \(got"):
            load_baseline(path)
    assert main(["baseline", "show", "--baseline-dir", str(tmp_path / "bl")]) == 2
    assert f"baseline {path}" in capsys.readouterr().err


def test_a_mistyped_folder_or_an_empty_role_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that is not there read as an empty store (exit 0), a file given as the
    baseline folder was said not to exist, and ``--draft-model =/x.gguf`` wrote the path
    ``=/x.gguf`` into the suite file."""
    from pytest_specdec.cli.layout import parse_draft
    from pytest_specdec.core.configs import ConfigError

    assert main(["baseline", "show", "--baseline-dir", str(tmp_path / "typo")]) == 2
    assert f"--baseline-dir {tmp_path / 'typo'} is not a folder" in capsys.readouterr().err
    afile = _results(tmp_path / "r.json")
    assert main(["report", "site", str(tmp_path / "site"), "--baseline-dir", str(afile)]) == 2
    assert f"the baseline folder {afile} is a file, not a folder" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="the role before '=' is empty"):
        parse_draft("=/x.gguf")
    assert parse_draft("dflash=/m/d") == ("dflash", "/m/d")
    assert parse_draft("/m/a=b.gguf") == ("draft", "/m/a=b.gguf")
