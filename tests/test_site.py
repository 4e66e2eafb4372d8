"""`specdec report site`: the nightly dashboard from the committed H200 baselines and results
plus a seeded 40-night key with a 4% step; bad input (empty folder, corrupt file, mixed
schema versions, missing chart library); the Markdown renderer and the redaction."""

from __future__ import annotations

import gzip
import html
import importlib
import json
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests_support import bench

from pytest_specdec.cli import main
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.report import site_assets
from pytest_specdec.report.site import SiteSummary, build_site
from pytest_specdec.report.site_data import SiteError
from pytest_specdec.report.site_markdown import render
from pytest_specdec.verdict.baselines import BASELINE_SCHEMA, baseline_path, key_for
from pytest_specdec.verdict.sessions import session_entries

REPO = Path(__file__).resolve().parent.parent
SEEDED = "gpu-nvidia-h200-x1/sglang/dflash-b16--seeded-target-gguf.json"


site_build = bench("site_build")


@pytest.fixture(scope="module")
def must_show(tmp_path_factory: pytest.TempPathFactory) -> tuple[SiteSummary, str]:
    work = tmp_path_factory.mktemp("must-show")
    site = site_build.must_show(work / "site", work / "inputs")
    return site, site_build.night_doc(25, [], site_build.np.random.default_rng(0))["started_at"]


def overview_row(index: str, slug: str) -> str:
    rows = re.findall(r"<tr>(.*?)</tr>", index, re.S)
    (row,) = [r for r in rows if f'href="keys/{slug}.html"' in r]
    return row


def test_must_show_the_overview_names_the_steps_night(must_show: tuple[SiteSummary, str]) -> None:
    site, step_night = must_show
    views = {k.name: k for k in site.data.keys}
    seeded = views[SEEDED]
    assert len(seeded.nights) == 40
    (point,) = seeded.points
    assert abs(point.index - 25) <= 1 and point.engine_after == "b1100"
    assert 0.94 < point.ratio < 0.98
    index = (site.out / "index.html").read_text(encoding="utf-8")
    row = overview_row(index, seeded.slug)
    assert point.night in row and "b1000 → b1100" in html.unescape(row)
    assert f"{point.ratio - 1:+.1%}" in row and "UNCHANGED" in row  # suite verdict, acceptance
    if point.index == 25:
        assert step_night in row
    # every key of the committed store is a row, each linking to a page that exists
    committed = {
        str(p.relative_to(REPO / "baselines")) for p in (REPO / "baselines").rglob("*.json")
    }
    assert committed <= set(views)
    for view in site.data.keys:
        overview_row(index, view.slug)
        assert (site.out / "keys" / f"{view.slug}.html").is_file()
    # the committed results carry no acceptance verdict: a dash, not a made-up value
    h200 = views["gpu-nvidia-h200-x1/sglang/dflash-b16--mb-smollm2-7-4b-s0-1-seed1-hf.json"]
    assert h200.acceptance() is None and overview_row(index, h200.slug).endswith("<td>\u2013</td>")


def test_the_key_page_marks_the_change_point_and_shows_telemetry(
    must_show: tuple[SiteSummary, str],
) -> None:
    site, _ = must_show
    view = next(k for k in site.data.keys if k.name == SEEDED)
    text = (site.out / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
    spec = json.loads(re.search(r'id="trend-spec">(.*?)</script>', text, re.S).group(1))  # type: ignore[union-attr]
    marks = [layer["data"]["values"] for layer in spec["layer"] if "data" in layer]
    assert {"night": view.points[0].night}.items() <= marks[-1][0].items()
    hover = {t["title"] for t in spec["layer"][2]["encoding"]["tooltip"]}
    assert {"night", "engine", "commit", "tok/s", "95% CI", "accept length", "sessions"} <= hover
    assert len(spec["data"]["values"]) == 40
    assert "GPU 0: 25 measured runs" in text and "sw_power_cap" in text
    point = view.points[0]  # the change and its CI in one unit
    assert f"{point.ratio - 1:+.1%} [{point.ci_low - 1:+.1%}, {point.ci_high - 1:+.1%}]" in text
    assert "Latest night" in text and "quicksort" in text
    # the latest night came from a results file: its run page is linked and written
    run = view.nights[-1].run
    assert run and (site.out / "runs" / f"{run}.html").is_file()


def test_the_site_is_small_and_names_no_remote_asset(must_show: tuple[SiteSummary, str]) -> None:
    site, _ = must_show
    assert site.size < 5_000_000
    for page in site.out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "Content-Security-Policy" in text and "connect-src 'none'" in text
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page


def test_the_overview_shows_a_verdicts_ratio_and_reads_a_folder_of_gzipped_results(
    tmp_path: Path,
) -> None:
    """The overview's verdict cell carries the suite ratio; a --results folder whose results
    are kept gzipped is read like one of plain JSON."""
    committed = REPO / "docs" / "gpu-run" / "dflash" / "h200-dflash-b16-generator1.json"
    folder = tmp_path / "results"
    folder.mkdir()
    with gzip.open(folder / "night.json.gz", "wt", encoding="utf-8") as fh:
        fh.write(committed.read_text(encoding="utf-8"))
    site = build_site(tmp_path / "site", tmp_path / "none", [folder])
    view = next(k for k in site.data.keys if k.key.get("config") == "dflash-b16")
    ratio = view.verdict()["suite"]["ratio"]  # type: ignore[index]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert f" {ratio:.3f}x" in overview_row(index, view.slug)


def _doc(night: int) -> dict[str, Any]:
    entries = [("dflash-b16", 100.0, 3.0, "b1000")]
    return dict(site_build.night_doc(night, entries, site_build.np.random.default_rng(night)))


def test_a_corrupt_results_file_is_named_and_skipped(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for night in range(3):
        atomic_write_json(results / f"n{night}.json", _doc(night))
    (results / "broken.json").write_text('{"schema": 1, "configs": [', encoding="utf-8")
    site = build_site(tmp_path / "site", tmp_path / "no-baselines", [results])
    assert len(site.data.keys) == 1 and len(site.data.keys[0].nights) == 3
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "broken.json" in index and "not valid JSON" in index
    assert "broken.json" in site.describe()


def test_an_empty_folder_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "baselines").mkdir()
    code = main(["report", "site", str(tmp_path / "site"), "--baseline-dir",
                 str(tmp_path / "baselines"), "--results", str(tmp_path / "empty")])  # fmt: skip
    assert code == 2
    assert "--results folder" in capsys.readouterr().err
    code = main(["report", "site", str(tmp_path / "site"), "--baseline-dir",
                 str(tmp_path / "baselines")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "is empty" in err and "--results" in err
    assert not (tmp_path / "site").exists()


def test_mixed_schema_versions_are_refused(tmp_path: Path) -> None:
    results = tmp_path / "results"
    atomic_write_json(results / "old.json", _doc(0))
    atomic_write_json(results / "new.json", {**_doc(1), "schema": 2})
    with pytest.raises(SiteError, match=r"mixed schema versions: .*new\.json \(schema 2\)"):
        build_site(tmp_path / "site", tmp_path / "none", [results])


def test_without_the_chart_library_the_extra_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.import_module

    def no_vl_convert(name: str, package: str | None = None) -> ModuleType:
        if name == "vl_convert":
            raise ImportError("No module named 'vl_convert'")
        return real(name, package)

    monkeypatch.setattr(site_assets.importlib, "import_module", no_vl_convert)
    code = main(["report", "site", str(tmp_path / "site"), "--results", str(tmp_path)])
    assert code == 2 and "pip install 'pytest-specdec[site]'" in capsys.readouterr().err


def test_a_baseline_reset_is_marked(tmp_path: Path) -> None:
    docs = [_doc(n) for n in range(12)]
    for doc in docs[:4]:  # nights from results files only, before the store starts over
        atomic_write_json(tmp_path / "results" / f"{doc['started_at'][:10]}.json", doc)
    key = key_for(docs[0], docs[0]["configs"][0])
    sessions = [e for d in docs[4:] for e in session_entries(d, d["configs"][0])]
    atomic_write_json(baseline_path(tmp_path / "b", key),
                      {"schema": BASELINE_SCHEMA, "key": key, "sessions": sessions})  # fmt: skip
    site = build_site(tmp_path / "site", tmp_path / "b", [tmp_path / "results"])
    (view,) = site.data.keys
    (reset,) = view.resets
    assert reset.night == docs[4]["started_at"] and reset.earlier == 4
    page = (tmp_path / "site" / "keys" / f"{view.slug}.html").read_text(encoding="utf-8")
    assert "Baseline reset" in page and "baseline reset" in page


def test_the_markdown_renderer_escapes_everything_but_its_own_tags() -> None:
    text = (
        "## T <b>x</b>\n\nhi <script>alert(1)</script> **bold** `a<b>|c` &lt;kept&gt;<br>"
        ' <img src=x onerror="y">\n\n| a | b |\n| --- | ---: |\n| `x\\|y` | 1<br>2 |\n\n'
        "<details><summary>s <i>x</i></summary>\n\n- item\n  ```\n  <code>\n  ```\n\n</details>\n"
        "</details>\n<details>\n"
    )
    out = render(text)
    assert "<script>" not in out and "<img" not in out and "<b>" not in out and "<i>" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out and "&lt;kept&gt;<br>" in out
    assert "<strong>bold</strong>" in out and "<code>a&lt;b&gt;|c</code>" in out
    assert '<td class="num">1<br>2</td>' in out and "<code>x|y</code>" in out
    assert "<summary>s &lt;i&gt;x&lt;/i&gt;</summary>" in out
    assert "<pre><code>&lt;code&gt;</code></pre>" in out
    assert out.count("<details>") == out.count("</details>") == 2


def test_commands_reports_and_logs_are_redacted(tmp_path: Path) -> None:
    doc = _doc(0)
    config = doc["configs"][0]
    config["command"] = ["server", "--api-key", "sekrit-1", "--hf-token=sekrit-2", "--port", "1",
                         "--speculative-num-draft-tokens", "4"]  # fmt: skip
    config["env"] = {"HF_TOKEN": "sekrit-3", "CUDA_VISIBLE_DEVICES": "0",
                     "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    config["log_path"] = "/runner/logs/sglang-dflash-b16-30001.log"
    (tmp_path / "results" / "logs").mkdir(parents=True)
    (tmp_path / "results" / "logs" / "sglang-dflash-b16-30001.log").write_text(
        "server_args=ServerArgs(api_key='sekrit-1', max_total_tokens=4096)\n"
        "Authorization: Bearer sekrit-4\nhf_abcdefghijklmnopqrstuvwxyz012345 ok\n",
        encoding="utf-8",
    )
    atomic_write_json(tmp_path / "results" / "night.json", doc)
    site = build_site(tmp_path / "site", tmp_path / "none", [tmp_path / "results"])
    (run,) = site.data.runs
    page = (tmp_path / "site" / "runs" / f"{run.slug}.html").read_text(encoding="utf-8")
    (log,) = (tmp_path / "site" / "runs" / run.slug).glob("*.txt")
    written = page + log.read_text(encoding="utf-8")
    assert "sekrit" not in written and "hf_abcdefghij" not in written
    assert "--api-key ***" in page and "CUDA_VISIBLE_DEVICES=0" in page
    assert "max_total_tokens=4096" in written  # not every name with 'token' in it is a secret
    # a setting whose name holds "tokens" keeps its value, and the page its numbers and data
    assert "--speculative-num-draft-tokens 4" in page and "TOKENIZERS_PARALLELISM=false" in page
    assert f'href="{run.slug}/{log.name}"' in page and "<h2>Report</h2>" in page


def test_the_bench_builds_at_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = site_build.scale(tmp_path, 12, 6)
    assert len(site.data.keys) == 6 and all(len(k.nights) == 12 for k in site.data.keys)
    assert re.search(r"built 12 nights x 6 keys in [\d.]+ s: \d+ files", capsys.readouterr().out)
    shutil.rmtree(tmp_path / "site")


def test_a_results_file_naming_another_file_as_its_log_puts_none_of_it_on_the_site(
    tmp_path: Path,
) -> None:
    """A log is taken only where it is named as the plugin names an engine log
    (``<engine>-<config>-<port>.log``): a results file from an artifact that names
    ``/etc/passwd``, or a log of another config, publishes nothing."""
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for n, recorded in enumerate([str(secret), "/runner/logs/sglang-eagle3-30001.log"]):
        doc = _doc(n)
        doc["configs"][0]["log_path"] = recorded
        (tmp_path / "results" / "logs").mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / "logs" / "sglang-eagle3-30001.log").write_text("other config")
        atomic_write_json(tmp_path / "results" / f"night{n}.json", doc)
    site = build_site(tmp_path / "site", tmp_path / "none", [tmp_path / "results"])
    assert len(site.data.runs) == 2
    assert not list((tmp_path / "site" / "runs").rglob("*.txt"))


def test_a_rebuild_removes_only_what_the_site_wrote(tmp_path: Path) -> None:
    """The site's folders may hold the user's own files (docs/ published to GitHub Pages):
    a rebuild removes the files the last build listed in its manifest, not those; a folder
    that holds such names but was never a site is refused before anything is written."""
    results = tmp_path / "results"
    atomic_write_json(results / "n0.json", _doc(0))
    docs = tmp_path / "docs"
    (docs / "assets").mkdir(parents=True)
    (docs / "assets" / "logo.png").write_bytes(b"png")
    with pytest.raises(SiteError, match=r"already holds assets, which no earlier report site"):
        build_site(docs, tmp_path / "none", [results])
    assert sorted(p.name for p in docs.rglob("*")) == ["assets", "logo.png"]
    site = tmp_path / "site"
    first = build_site(site, tmp_path / "none", [results])
    (site / "assets" / "logo.png").write_bytes(b"png")  # the user's, added after the build
    stale = next((site / "runs").glob("*.html"))
    atomic_write_json(results / "n0.json", _doc(1))  # another run: another page
    (results / "n0.json").rename(results / "n1.json")
    second = build_site(site, tmp_path / "none", [results])
    assert (site / "assets" / "logo.png").read_bytes() == b"png"
    assert not stale.exists() and len(second.data.runs) == len(first.data.runs) == 1
    listed = json.loads((site / ".specdec-site.json").read_text())["files"]
    assert "assets/logo.png" not in listed and "index.html" in listed
    (site / ".specdec-site.json").write_text('{"files": ["../outside.txt"]}')
    with pytest.raises(SiteError, match="lists files outside the site's folders"):
        build_site(site, tmp_path / "none", [results])
