"""The dashboard in a real browser: headless Chromium (Debian's package) loads the generated
site from disk, runs its scripts and draws its charts. Checked: the overview lists every key;
the seeded step's change point shows on its key's page with its night; a real run's load curves
are drawn on its run page and its levels' history on its key's page; no request leaves the
page (Chromium's own net log, with a control page that does make one); the screenshot is not
blank. Skipped with the reason where Chromium is not installed (`./scripts/setup` installs it
on CI)."""

from __future__ import annotations

import http.server
import json
import math
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import Image
from test_site import SEEDED  # the must-show site's seeded key
from tests_support import bench

from pytest_specdec.report.site import SiteSummary, build_site

REAL = Path(__file__).resolve().parent / "data" / "site-load"  # a llama-server run, load levels
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"
)
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--virtual-time-budget=15000",
]  # fmt: skip


def chromium(tmp: Path, url: str, *args: str) -> tuple[str, list[str]]:
    """Run headless Chromium on ``url``: (stdout, the http(s) URLs a page asked for).

    Requests Chromium makes for itself (component updates, sign-in) carry the initiator
    "not an origin" in the net log; a page's requests carry the page's origin ("null" for a
    file:// page)."""
    tmp.mkdir(parents=True, exist_ok=True)
    netlog = tmp / "netlog.json"
    done = subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--log-net-log={netlog}",
         *args, url],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    log = json.loads(netlog.read_text(encoding="utf-8"))
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls: dict[int, str] = {}
    page: set[int] = set()
    for event in log["events"]:
        params: dict[str, Any] = event.get("params") or {}
        source = int(event["source"]["id"])
        if isinstance(params.get("url"), str):
            urls.setdefault(source, params["url"])
        initiator = params.get("initiator")
        started = names.get(event["type"]) == "URL_REQUEST_START_JOB"
        if started and initiator not in (None, "not an origin"):
            page.add(source)
    remote = sorted({urls[s] for s in page if urls.get(s, "").startswith(("http:", "https:"))})
    return done.stdout, remote


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> SiteSummary:
    work = tmp_path_factory.mktemp("browser")
    summary: SiteSummary = bench("site_build").must_show(work / "site", work / "inputs")
    return summary


def test_the_overview_lists_every_key_and_asks_nothing_of_the_network(
    site: SiteSummary, tmp_path: Path
) -> None:
    dom, remote = chromium(tmp_path, (site.out / "index.html").as_uri(), "--dump-dom")
    assert remote == []
    table = dom[dom.index('id="overview"') :]
    for view in site.data.keys:
        assert f'href="keys/{view.slug}.html"' in table, view.name
    assert re.search(r'<pre id="csp-violations" hidden="">\s*</pre>', dom)


def test_the_change_point_shows_on_its_keys_page(site: SiteSummary, tmp_path: Path) -> None:
    view = next(k for k in site.data.keys if k.name == SEEDED)
    (point,) = view.points
    page = site.out / "keys" / f"{view.slug}.html"
    dom, remote = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert remote == []
    changes = dom[dom.index("<h2>Change points</h2>") : dom.index("<h2>Per prompt</h2>")]
    assert point.night in changes and "b1000 → b1100" in changes
    assert dom.count('data-rendered="yes"') == 2  # the trend and the heatmaps were drawn
    trend = dom[dom.index('id="trend"') : dom.index('id="trend-spec"')]
    assert trend.count("<svg") >= 1 and "mark-rule" in trend and "mark-symbol" in trend
    assert re.search(r'<pre id="csp-violations" hidden="">\s*</pre>', dom)


def test_the_screenshot_is_not_blank(site: SiteSummary, tmp_path: Path) -> None:
    shot = tmp_path / "overview.png"
    _, remote = chromium(
        tmp_path, (site.out / "index.html").as_uri(), "--window-size=1400,1000",
        f"--screenshot={shot}",
    )  # fmt: skip
    assert remote == []
    with Image.open(shot) as image:
        size, counts = image.size, image.convert("L").histogram()
    assert size == (1400, 1000) and sum(counts) == 1400 * 1000
    mean = sum(v * n for v, n in enumerate(counts)) / sum(counts)
    sd = math.sqrt(sum(n * (v - mean) ** 2 for v, n in enumerate(counts)) / sum(counts))
    assert sd > 20 and sum(1 for n in counts if n) > 50  # not one colour: text, tables, lines


class _Probe(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Probe.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def probe() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_the_network_check_sees_a_page_that_does_ask(tmp_path: Path, probe: int) -> None:
    """The control: without the site's policy, an image from a server is a request the net
    log shows (and the server gets), so an empty list above means no request was made."""
    page = tmp_path / "asks.html"
    page.write_text(f'<img src="http://127.0.0.1:{probe}/probe.png">', encoding="utf-8")
    _, remote = chromium(tmp_path / "run", page.as_uri(), "--dump-dom")
    assert remote == [f"http://127.0.0.1:{probe}/probe.png"]
    assert "/probe.png" in _Probe.hits


@pytest.fixture(scope="module")
def load_site(tmp_path_factory: pytest.TempPathFactory) -> SiteSummary:
    """The site of the committed llama-server run with load levels (tests/data/site-load)."""
    return build_site(
        tmp_path_factory.mktemp("load") / "site",
        REAL / "baselines",
        [REAL / "llamacpp-np2-load.json"],
    )


def test_the_load_curves_are_drawn_on_the_run_and_key_pages(
    load_site: SiteSummary, tmp_path: Path
) -> None:
    (run,) = load_site.data.runs
    page = load_site.out / "runs" / f"{run.slug}.html"
    dom, remote = chromium(tmp_path / "run", page.as_uri(), "--dump-dom")
    assert remote == []
    assert dom.count('data-rendered="yes"') == 2  # the throughput and the speedup curves
    throughput = dom[dom.index('id="load-throughput"') : dom.index('id="load-throughput-spec"')]
    assert "mark-area" in throughput and "mark-line" in throughput and "mark-symbol" in throughput
    speedup = dom[dom.index('id="load-speedup-0"') : dom.index('id="load-speedup-0-spec"')]
    assert "mark-rule" in speedup and "mark-symbol" in speedup
    assert re.search(r'<pre id="csp-violations" hidden="">\s*</pre>', dom)
    view = next(k for k in load_site.data.keys if k.key["config"] == "draft-np2")
    key = load_site.out / "keys" / f"{view.slug}.html"
    dom, remote = chromium(tmp_path / "key", key.as_uri(), "--dump-dom")
    assert remote == []
    assert dom.count('data-rendered="yes"') == 3  # the trend, the heatmaps, the load history
    history = dom[dom.index('id="load-history"') : dom.index('id="load-history-spec"')]
    assert history.count("1 client<") + history.count("4 clients<") == 2  # a panel per level
