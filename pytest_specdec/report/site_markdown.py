"""A small, safe Markdown → HTML renderer for the run reports the package writes
(:func:`pytest_specdec.report.export.markdown_summary`).

It knows the subset those reports use: ATX headings, paragraphs, GitHub tables (with column
alignment), bullet lists, fenced code, inline code, bold, and the ``<details>`` /
``<summary>`` / ``<br>`` tags the reports put around collapsed sections. Everything else is
text: every character is escaped, then only those exact tags are given back, and the HTML
entities the report already escaped (``&lt;``) are kept as entities. No attribute, link, image
or other tag can come out of it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

ENTITY = re.compile(r"&amp;(amp|lt|gt|quot|#39|#x27|#\d{1,7}|#x[0-9A-Fa-f]{1,6});")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
BOLD = re.compile(r"\*\*(.+?)\*\*")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
DETAILS_OPEN = re.compile(r"^<details>\s*(?:<summary>(.*?)</summary>)?\s*$")
ALIGN_ROW = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
BULLET = re.compile(r"^[-*]\s+(.*)$")


def _text(text: str) -> str:
    """Escaped text, the entities it already had kept, ``<br>`` given back."""
    out = ENTITY.sub(r"&\1;", html.escape(text, quote=True))
    out = out.replace("&lt;br&gt;", "<br>").replace("&lt;br/&gt;", "<br>")
    return BOLD.sub(r"<strong>\1</strong>", out)


def inline(text: str) -> str:
    """Inline Markdown: code spans (verbatim, escaped), bold, ``<br>``; the rest escaped."""
    out, pos = [], 0
    for match in CODE_SPAN.finditer(text):
        out.append(_text(text[pos : match.start()]))
        out.append(f"<code>{html.escape(match.group(2).strip(), quote=True)}</code>")
        pos = match.end()
    out.append(_text(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """The cells of a table row; ``\\|`` is a pipe inside a cell."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def _table(lines: list[str]) -> str:
    head, aligns = _cells(lines[0]), _cells(lines[1])
    style = [' class="num"' if a.endswith(":") and not a.startswith(":") else "" for a in aligns]
    out = ["<table><thead><tr>"]
    out += [f"<th{style[i] if i < len(style) else ''}>{inline(c)}</th>" for i, c in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for row in lines[2:]:
        cells = _cells(row)
        out.append("<tr>" + "".join(
            f"<td{style[i] if i < len(style) else ''}>{inline(c)}</td>" for i, c in enumerate(cells)
        ) + "</tr>")  # fmt: skip
    out.append("</tbody></table>")
    return "".join(out)


class _Blocks:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.i = 0

    def __iter__(self) -> Iterator[str]:
        while self.i < len(self.lines):
            yield self.block()

    def block(self) -> str:
        line = self.lines[self.i]
        stripped = line.strip()
        self.i += 1
        if not stripped:
            return ""
        if fence := FENCE.match(stripped):
            return self.code(fence.group(1))
        if heading := HEADING.match(stripped):
            level = len(heading.group(1))
            return f"<h{level}>{inline(heading.group(2))}</h{level}>"
        if details := DETAILS_OPEN.match(stripped):
            summary = details.group(1)
            return "<details>" + (f"<summary>{inline(summary)}</summary>" if summary else "")
        if stripped == "</details>":
            return "</details>"
        nxt = self.lines[self.i].strip() if self.i < len(self.lines) else ""
        if stripped.startswith("|") and ALIGN_ROW.match(nxt):
            rows = [stripped, nxt]
            self.i += 1
            while self.i < len(self.lines) and self.lines[self.i].strip().startswith("|"):
                rows.append(self.lines[self.i].strip())
                self.i += 1
            return _table(rows)
        if BULLET.match(stripped):
            self.i -= 1
            return self.bullets()
        return self.paragraph(stripped)

    def code(self, fence: str) -> str:
        body = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            self.i += 1
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                break
            body.append(line)
        return f"<pre><code>{html.escape(chr(10).join(body), quote=True)}</code></pre>"

    def bullets(self) -> str:
        items: list[str] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            item = BULLET.match(line.strip()) if not line.startswith((" ", "\t")) else None
            if item:
                items.append(inline(item.group(1)))
                self.i += 1
            elif line.startswith((" ", "\t")) and line.strip() and items:
                nested = []  # an indented block under the item (a collapsed error, say)
                while self.i < len(self.lines) and (
                    self.lines[self.i].startswith((" ", "\t")) or not self.lines[self.i].strip()
                ):
                    nested.append(self.lines[self.i][2:] if self.lines[self.i].startswith("  ")
                                  else self.lines[self.i].lstrip())  # fmt: skip
                    self.i += 1
                items[-1] += render("\n".join(nested))
            else:
                break
        return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"

    def paragraph(self, first: str) -> str:
        parts = [first]
        while self.i < len(self.lines):
            line = self.lines[self.i].strip()
            if not line or FENCE.match(line) or HEADING.match(line) or line.startswith(("|", "<")):
                break
            if BULLET.match(line):
                break
            parts.append(line)
            self.i += 1
        return f"<p>{inline(' '.join(parts))}</p>"


def render(text: str) -> str:
    """HTML of a Markdown report; safe to put in a page whatever the text holds (a
    ``</details>`` without its ``<details>`` is dropped, an unclosed one closed)."""
    out, depth = [], 0
    for block in _Blocks(text):
        if block == "</details>":
            if depth == 0:
                continue
            depth -= 1
        elif block.startswith("<details>"):
            depth += 1
        if block:
            out.append(block)
    return "\n".join([*out, *["</details>"] * depth])
