"""A wheel's importable top-level names, read from its RECORD in place (HTTP range requests) or
from a copy, and the index of which distribution of a plan provides a module.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import IO, cast

from specdec_lab.installs.shared import Entry, canon


class RemoteFile:
    """Read-only, seekable view of a remote file through HTTP range requests."""

    def __init__(self, url: str) -> None:
        self.url, self.pos, self.start, self.data = url, 0, -1, b""
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            self.size = int(r.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = [offset, self.pos + offset, self.size + offset][whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        if n > 0 and not self.start <= self.pos <= self.pos + n <= self.start + len(self.data):
            span = {"Range": f"bytes={self.pos}-{min(self.pos + max(n, 1 << 18), self.size) - 1}"}
            with urllib.request.urlopen(urllib.request.Request(self.url, headers=span)) as r:
                if r.status != 206:
                    raise OSError(f"{self.url}: the server ignores range requests")
                self.start, self.data = self.pos, r.read()
        chunk = self.data[self.pos - self.start : self.pos - self.start + max(n, 0)]
        self.pos += len(chunk)
        return chunk


def wheel_record(url: str, cache: Path) -> str:
    """The RECORD of a wheel: read in place by range requests, or downloaded once to ``cache``."""
    try:
        remote = url.startswith(("http://", "https://"))
        wheel = zipfile.ZipFile(
            cast(IO[bytes], RemoteFile(url)) if remote else url[7 * url.startswith("file://") :]
        )
    except OSError:
        local = cache / "wheels" / url.rsplit("/", 1)[-1]
        if not local.is_file():
            local.parent.mkdir(parents=True, exist_ok=True)
            urllib.request.urlretrieve(url, local)
        wheel = zipfile.ZipFile(local)
    with wheel:
        names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
        return wheel.read(names[0]).decode() if names else ""


def top_level_modules(record: str) -> set[str]:
    """Importable top-level names of a wheel, from its RECORD."""
    tops = set()
    for line in record.splitlines():
        parts = line.split(",", 1)[0].split("/")
        if parts[0].endswith(".data") and len(parts) > 3 and parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        if len(parts) > 1:
            tops.add(parts[0])
        elif parts[0].endswith((".py", ".so", ".pyd")):
            tops.add(parts[0].split(".")[0])
    return {t for t in tops if t.isidentifier()}


class ModuleIndex:
    """Which distribution of the plan provides a top-level module (RECORDs, cached)."""

    def __init__(self, entries: list[Entry], cache: Path) -> None:
        self.entries, self.cache, self.path = entries, cache, cache / "top-level.json"
        self.known = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def tops(self, entry: Entry) -> set[str]:
        if (key := entry["filename"]) not in self.known:
            self.known[key] = sorted(top_level_modules(wheel_record(entry["url"], self.cache)))
            self.path.write_text(json.dumps(self.known, indent=1, sort_keys=True))
        return set(self.known[key])

    def provider(self, module: str) -> Entry | None:
        """Likely names first (module == name, same prefix), the runner's own last."""
        guess = canon(module)
        prefix = guess.split("-")[0]

        def rank(entry: Entry) -> tuple[bool, bool, bool]:
            name = canon(entry["name"])
            return name != guess, not name.startswith(prefix), entry["status"] == "runner"

        return next((e for e in sorted(self.entries, key=rank) if module in self.tops(e)), None)
