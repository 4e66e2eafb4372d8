"""What every page of the dashboard shares: the chart library, the style sheet, the page
script, the page shell with its Content-Security-Policy, and the pieces of its pages (tables,
numbers, verdict badges, links to run pages).

The charts are drawn by Vega-Lite, Vega and vega-embed, in the standalone bundle that the
``vl-convert-python`` wheel carries (``vl_convert.javascript_bundle()``: the three libraries,
built and minified by the Vega project's own converter; about 0.9 MB). It is written once, to
``assets/vega-bundle.js`` beside the pages, so a site of many pages stays small, and nothing is
fetched from a CDN: every page works from ``file://`` and behind GitHub Pages with no network.
The policy of each page forbids any request to another origin (and any fetch at all).
"""

from __future__ import annotations

import functools
import html
import importlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUTCOME = re.compile(r"[A-Z][A-Z-]*")
SITE_EXTRA = "pip install 'pytest-specdec[site]'"
BUNDLE = "assets/vega-bundle.js"
SCRIPT = "assets/site.js"
STYLE = "assets/site.css"
# Vega compiles its expressions with Function(), hence 'unsafe-eval'; connect-src 'none'
# forbids every fetch, so the policy alone keeps a page off the network.
CSP = (
    "default-src 'self' 'unsafe-inline' file: data:; "
    "script-src 'self' 'unsafe-inline' 'unsafe-eval' file:; "
    "connect-src 'none'; base-uri 'none'; form-action 'none'"
)


class SiteUnavailable(ImportError):
    """The chart library's package is not installed; the message names the extra."""


def check_available() -> None:
    """Raise :class:`SiteUnavailable` now, before any input is read."""
    _vl_convert()


def _vl_convert() -> Any:
    try:
        return importlib.import_module("vl_convert")
    except ImportError as exc:
        raise SiteUnavailable(
            "the dashboard's charts need vl-convert-python (the Vega-Lite, Vega and "
            f"vega-embed bundle), which is not installed: {SITE_EXTRA}"
        ) from exc


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega-Lite + Vega + vega-embed as one classic script that defines ``window.vegaEmbed``;
    wrapped in a function so its top-level names stay out of the page's global scope."""
    module = _vl_convert()
    versions = (
        f"vega {module.get_vega_version()}, vega-lite {module.get_vegalite_versions()[-1]}, "
        f"vega-embed {module.get_vega_embed_version()}"
    )
    body = str(module.javascript_bundle())
    return (
        f"/* {versions}; from vl-convert-python (BSD-3-Clause) */\n(function(){{\n{body}\n}})();\n"
    )


STYLE_TEXT = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2733;
background:#f7f8fa}
header{background:#1d2733;color:#fff;padding:14px 24px}header a{color:#cfe0ff}
header h1{font-size:20px;margin:0}header p{margin:4px 0 0;color:#c8d0da}
main{padding:16px 24px;max-width:1500px}
h2{font-size:17px;margin:22px 0 8px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff;margin:6px 0 12px}
th,td{border:1px solid #d8dde3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.moved td{background:#fff4f0}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#fff;border:1px solid #d8dde3;padding:8px;overflow-x:auto;white-space:pre-wrap}
.verdict{font-weight:600;padding:1px 6px;border-radius:3px;background:#e8ebef}
.REGRESSED,.MISMATCH{background:#fbd5cc;color:#8a1c00}.IMPROVED{background:#d3f0d8;color:#14501f}
.UNCHANGED{background:#e3ecf7}.INCONCLUSIVE{background:#fff0c2}
.notes{background:#fff8e1;border:1px solid #f0d98a;padding:8px 12px;margin:10px 0}
.notes li{margin:2px 0}.muted{color:#6b7682}.chart{background:#fff;padding:6px;margin:6px 0}
.chart-error{color:#8a1c00;font-weight:600}nav a{margin-right:14px}
details{margin:8px 0}summary{cursor:pointer;font-weight:600}
"""

# Runs in every page: records any request the policy blocks (so a test can read them from the
# DOM), then draws each chart from the JSON spec beside its element.
SCRIPT_TEXT = """(function () {
  "use strict";
  document.addEventListener("securitypolicyviolation", function (e) {
    var log = document.getElementById("csp-violations");
    if (log) { log.textContent += e.violatedDirective + " " + e.blockedURI + "\\n"; }
  });
  function draw() {
    var nodes = document.querySelectorAll("[data-vega]");
    for (var i = 0; i < nodes.length; i++) {
      (function (node) {
        if (typeof window.vegaEmbed !== "function") {
          node.className += " chart-error";
          node.textContent = "chart library missing: assets/vega-bundle.js is not beside this page";
          node.setAttribute("data-rendered", "error");
          return;
        }
        var spec = JSON.parse(document.getElementById(node.getAttribute("data-vega")).textContent);
        window.vegaEmbed(node, spec, {mode: "vega-lite", actions: false, renderer: "svg"})
          .then(function () { node.setAttribute("data-rendered", "yes"); })
          .catch(function (err) {
            node.className += " chart-error";
            node.textContent = "chart failed: " + err;
            node.setAttribute("data-rendered", "error");
          });
      })(nodes[i]);
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else { draw(); }
})();
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


DASH = "\u2013"


def num(value: float | None, fmt: str = ".1f") -> str:
    return DASH if value is None else format(value, fmt)


def table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: str = "") -> str:
    """An HTML table; cells are HTML already; ``numeric`` has an ``r`` per right-aligned column."""
    cls = [
        ' class="num"' if i < len(numeric) and numeric[i] == "r" else "" for i in range(len(head))
    ]
    out = "<table><thead><tr>" + "".join(
        f"<th{c}>{esc(h)}</th>" for h, c in zip(head, cls, strict=True)
    )
    out += "</tr></thead><tbody>"
    for row in rows:
        out += "<tr>" + "".join(f"<td{c}>{v}</td>" for v, c in zip(row, cls, strict=True)) + "</tr>"
    return out + "</tbody></table>"


def verdict_badge(outcome: object, title: str = "") -> str:
    text = str(outcome or "")
    if not text:
        return DASH
    cls = text if OUTCOME.fullmatch(text) else ""
    return f'<span class="verdict {cls}" title="{esc(title)}">{esc(text)}</span>'


def night_cell(night: str, run: str | None, depth: int) -> str:
    text = f"<code>{esc(night)}</code>"
    return f'<a href="{"../" * depth}runs/{esc(run)}.html">{text}</a>' if run else text


def json_script(element_id: str, data: Any) -> str:
    """Data for the page script, in a non-executed script element (``<`` ``>`` ``&`` escaped,
    so no text in the data can close the element)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'


def chart(element_id: str, spec: dict[str, Any], label: str) -> str:
    return (
        f'<div class="chart" id="{esc(element_id)}" data-vega="{esc(element_id)}-spec" '
        f'role="figure" aria-label="{esc(label)}"></div>' + json_script(f"{element_id}-spec", spec)
    )


VIOLATIONS = '<pre id="csp-violations" hidden></pre>'  # every page has it: it marks the site's


def page(title: str, subtitle: str, body: str, depth: int, charts: bool = False) -> str:
    """A whole page; ``depth`` is how many folders below the site's root it is written."""
    up = "../" * depth
    scripts = f'<script src="{up}{BUNDLE}"></script>' if charts else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title>"
        f'<link rel="stylesheet" href="{up}{STYLE}">'
        f'<script src="{up}{SCRIPT}"></script>{scripts}</head>\n<body>'
        f'<header><h1>{esc(title)}</h1><p>{subtitle}</p><nav><a href="{up}index.html">'
        "overview</a></nav></header>\n<main>"
        f"{body}{VIOLATIONS}</main></body></html>\n"
    )


def write_assets(out: Path, charts: bool) -> list[Path]:
    """The shared files beside the pages."""
    (out / "assets").mkdir(parents=True, exist_ok=True)
    files = {STYLE: STYLE_TEXT, SCRIPT: SCRIPT_TEXT}
    if charts:
        files[BUNDLE] = vega_bundle()
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]
