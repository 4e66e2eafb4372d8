"""The dashboard's overview page and its page per run (results file).

Commands, environments, reports and logs pass through the engines' own redaction
(:func:`pytest_specdec.engines.base.redact`, with the values of secret-looking flags and
variables found in the record; results files are already written redacted), and logs also
through a pattern for ``name=value`` pairs whose name ends in key, token, secret or password.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.core.values import SECRET_NAME, masked
from pytest_specdec.engines.base import redact
from pytest_specdec.report.export import hardware_label, markdown_summary
from pytest_specdec.report.site_assets import DASH, esc, night_cell, num, page, table, verdict_badge
from pytest_specdec.report.site_charts import sparkline
from pytest_specdec.report.site_data import KeyView, RunView, SiteData
from pytest_specdec.report.site_key import change_text, hardware_text, model_text
from pytest_specdec.report.site_load import load_configs, run_section, without_mermaid
from pytest_specdec.report.site_markdown import render

LOG_LIMIT = 512 * 1024  # the last bytes of a log copied beside its run page
SECRET_PAIR = re.compile(
    r"(?i)\b([\w.-]*(?:key|token|secret|password|credentials?))(\s*[=:]\s*|\s+)(['\"]?)"
    r"([^\s'\",)}\]]+)"
)
BEARER = re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]+")
HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")


def secrets_of(config: Mapping[str, Any]) -> list[str]:
    """Values of secret-looking flags (``--api-key X``, ``--hf-token=X``) and environment
    variables in a config record, unless already hidden."""
    argv = [str(a) for a in config.get("command") or []]
    found = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and SECRET_NAME.search(flag):
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    found += [str(v) for k, v in (config.get("env") or {}).items() if SECRET_NAME.search(k)]
    return [s for s in found if s and s != "***"]


def redact_log(text: str, secrets: Sequence[str]) -> str:
    text = redact(text, secrets)
    text = SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}***", text)
    return HF_TOKEN.sub("***", BEARER.sub(r"\1***", text))


# --------------------------------------------------------------------------- overview


def _latest(view: KeyView) -> list[str]:
    if view.nights:
        night, run = view.nights[-1].started_at, view.nights[-1].run
        score = num(view.nights[-1].tok_s)
        low, high = view.nights[-1].ci_low, view.nights[-1].ci_high
        if low and high:
            score += f' <span class="muted">[{num(low)}\u2013{num(high)}]</span>'
    elif view.load_nights:  # load levels only: no suite score to show
        night, run = view.load_nights[-1].started_at, view.load_nights[-1].run
        score = '<span class="muted">load levels only</span>'
    else:
        return [DASH, DASH, DASH]
    verdict = view.verdict()
    badge = DASH
    if verdict:
        ratio = (verdict.get("suite") or {}).get("ratio")
        badge = verdict_badge(verdict.get("outcome"), str(verdict.get("message") or ""))
        badge += f" {ratio:.3f}x" if isinstance(ratio, float) else ""
    return [night_cell(night, run, 0), score, badge]


def _last_change(view: KeyView) -> str:
    if not view.points:
        return "none" if view.nights else DASH
    point = view.points[-1]
    return (
        f'<span class="changepoint">{night_cell(point.night, view.nights[point.index].run, 0)}'
        f"<br>{esc(point.engines())}<br>{esc(change_text(point))}</span>"
    )


def _acceptance(view: KeyView) -> str:
    found = view.acceptance()
    return verdict_badge(found["verdict"], str(found.get("message") or "")) if found else DASH


def _hardware_cell(hw: Mapping[str, Any]) -> str:
    short = f"{hw.get('count')}x {hw.get('name')}" if hw.get("kind") == "gpu" else hw.get("name")
    return f'<span title="{esc(hardware_text(hw))}">{esc(short)}</span>'


def overview(data: SiteData, generated: str, sources: str) -> str:
    rows = []
    for view in data.keys:
        key = view.key
        link = f'<a href="keys/{esc(view.slug)}.html">{esc(key.get("config"))}</a>'
        rows.append([
            _hardware_cell(key.get("hardware") or {}), esc(key.get("engine")), link,
            esc(model_text(key)), str(view.night_count), *_latest(view),
            sparkline(view), _last_change(view), _acceptance(view),
        ])  # fmt: skip
    head = ["hardware", "engine", "config", "model", "nights", "latest night", "suite tok/s",
            "verdict", "trend", "last change point", "acceptance"]  # fmt: skip
    body = [
        f"<p>{len(data.keys)} keys (hardware x engine x config x model), "
        f"{sum(k.night_count for k in data.keys)} key-nights; from {esc(sources)}.</p>"
    ]
    notes = [*data.notes, *(f"{k.name}: {n}" for k in data.keys for n in k.notes)]
    if notes:
        body.append(f'<p class="notes"><a href="#input-notes">{len(notes)} input(s) left out'
                    "</a>: files skipped and configs not joined to a key, each with the reason "
                    "(below the table).</p>")  # fmt: skip
    body.append(table(head, rows, "llllrlrllll").replace("<table>", '<table id="overview">', 1))
    if notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in notes)
        body.append(f'<details class="notes" id="input-notes"><summary>{len(notes)} input(s) '
                    f"left out</summary><ul>{items}</ul></details>")  # fmt: skip
    if data.runs:
        links = "".join(
            f'<li><a href="runs/{esc(r.slug)}.html">{esc(r.path.name)}</a> '
            f'<span class="muted">{esc(r.started_at)} · {esc(hardware_label(r.doc))}</span></li>'
            for r in sorted(data.runs, key=lambda r: r.started_at, reverse=True)
        )
        body.append(f"<h2>Runs</h2><ul>{links}</ul>")
    return page("Speculative decoding: nightly dashboard", f"generated {esc(generated)}",
                "".join(body), 0)  # fmt: skip


# --------------------------------------------------------------------------- run pages


def _log_file(run: RunView, config: Mapping[str, Any]) -> Path | None:
    """The config's engine log where it is beside the results file (or at its recorded path),
    named as the plugin names an engine log (``<engine>-<config>-<port>.log``): a results
    file that names another file (``/etc/passwd``) puts nothing of it on the site."""
    recorded = config.get("log_path")
    if not recorded:
        return None
    path = Path(str(recorded))
    stem, dot, port = path.name.removesuffix(".log").rpartition("-")
    if not (path.name.endswith(".log") and dot and port.isdigit()
            and stem == f"{config.get('engine')}-{config.get('name')}"):  # fmt: skip
        return None
    for candidate in (run.path.parent / path.name, run.path.parent / "logs" / path.name, path):
        if candidate.is_file():
            return candidate
    return None


def copy_log(source: Path, target: Path, secrets: Sequence[str]) -> str:
    """The log's last LOG_LIMIT bytes, redacted, at ``target``; a note when cut."""
    size = source.stat().st_size
    with source.open("rb") as fh:
        fh.seek(max(0, size - LOG_LIMIT))
        text = fh.read().decode("utf-8", errors="replace")
    head = f"[last {LOG_LIMIT} of {size} bytes of {source.name}]\n" if size > LOG_LIMIT else ""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(head + redact_log(text, secrets), encoding="utf-8")
    return "the last 512 KiB" if head else "whole"


def _config_block(run: RunView, config: Mapping[str, Any], out: Path) -> tuple[str, list[str]]:
    secrets = secrets_of(config)
    argv = [redact(str(a), secrets) for a in config.get("command") or []]
    for i, arg in enumerate(argv[:-1]):
        if arg.startswith("-") and SECRET_NAME.search(arg.partition("=")[0]) and "=" not in arg:
            argv[i + 1] = "***"
    name = str(config.get("name"))
    parts = [f"<h3><code>{esc(name)}</code> ({esc(config.get('engine'))} "
             f"{esc(config.get('engine_version') or 'version unknown')})</h3>"]  # fmt: skip
    command = shlex.join(argv) if argv else "no command recorded (an external server)"
    parts.append(f"<pre>{esc(command)}</pre>")
    env = masked({k: redact(str(v), secrets) for k, v in (config.get("env") or {}).items()})
    if env:
        parts.append(
            "<pre>" + esc("\n".join(f"{k}={v}" for k, v in sorted(env.items()))) + "</pre>"
        )
    log = _log_file(run, config)
    if log is not None:
        target = (
            out / "runs" / run.slug / re.sub(r"[^A-Za-z0-9._-]+", "-", f"{name}-{log.name}.txt")
        )
        part = copy_log(log, target, secrets)
        parts.append(f'<p>Engine log: <a href="{esc(run.slug)}/{esc(target.name)}">'
                     f"{esc(log.name)}</a> ({part}, redacted).</p>")  # fmt: skip
    elif config.get("log_path"):
        parts.append(f'<p class="muted">Engine log {esc(config["log_path"])}: not beside the '
                     "results file.</p>")  # fmt: skip
    return "".join(parts), secrets


def run_page(run: RunView, keys: Sequence[KeyView], out: Path, generated: str) -> str:
    blocks, secrets = [], []
    for config in run.doc["configs"]:
        block, found = _config_block(run, config, out)
        blocks.append(block)
        secrets += found
    mine = [
        k for k in keys if run.slug in {n.run for n in k.nights} | {n.run for n in k.load_nights}
    ]
    report = without_mermaid(markdown_summary(run.doc))
    links = "".join(
        f'<li><a href="../keys/{esc(k.slug)}.html">{esc(k.name)}</a></li>' for k in mine
    )
    body = [
        f"<p>Results file <code>{esc(run.path)}</code>, started {esc(run.started_at)}.</p>",
        f"<h2>Keys</h2><ul>{links}</ul>" if links else "",
        redact(run_section(run.doc), secrets),
        "<h2>Engine commands</h2>",
        *blocks,
        "<h2>Report</h2>",
        f'<div class="report">{render(redact(report, secrets))}</div>',
    ]
    subtitle = f"{esc(hardware_label(run.doc))} · generated {esc(generated)}"
    return page(f"Run {run.path.name}", subtitle,
                "".join(body), 1, charts=bool(load_configs(run.doc)))  # fmt: skip
