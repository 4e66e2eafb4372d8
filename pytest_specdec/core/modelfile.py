"""Model files: their identity (sha256, cached across runs) and the bytes one decoded token reads.

A model's identity is part of every baseline key. Hashing a 15 GB file takes seconds to
minutes, so the digest is kept in ``$SPECDEC_CACHE/sha256/`` keyed by the resolved path, size
and modification time: a file that changes in any of them is hashed again.

The weight bytes come from the GGUF header (read here without the ``gguf`` package): the sum
of the tensors' sizes, and of those one decode step reads in full. The token embedding table
is gathered (one row per token), not read, unless it doubles as the output head (tied
embeddings, no ``output.weight``). Hugging Face folders count their ``*.safetensors`` files.
This module imports nothing else from the package.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from pytest_specdec.core.results import atomic_replace

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUF metadata value types: fixed-size ones by their struct format.
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MEMO: dict[tuple[str, int, int], str] = {}


class ModelFileError(ValueError):
    """A model file is not what its name says (e.g. a truncated or foreign GGUF)."""


def cache_root() -> Path:
    """The pytest-specdec cache: ``$SPECDEC_CACHE`` or ``~/.cache/pytest-specdec``."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "pytest-specdec"))


# ------------------------------------------------------------------------------- identity


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB blocks (no cache: see file_sha256)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _cache_file(resolved: str) -> Path:
    return cache_root() / "sha256" / f"{hashlib.sha256(resolved.encode()).hexdigest()[:32]}.json"


def file_sha256(path: Path, digest: Callable[[Path], str] = sha256_of) -> str:
    """The file's sha256, from this process's memo, the on-disk cache, or by reading it."""
    resolved = str(path.resolve())
    stat = path.stat()
    key = (resolved, stat.st_size, stat.st_mtime_ns)
    if key in _MEMO:
        return _MEMO[key]
    cached = _cache_file(resolved)
    try:
        entry = json.loads(cached.read_text(encoding="utf-8"))
        if (entry["path"], entry["size"], entry["mtime_ns"]) == key:
            _MEMO[key] = str(entry["sha256"])
            return _MEMO[key]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no entry, or an unreadable one: hash the file
    _MEMO[key] = digest(path)
    entry = {"path": resolved, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    _write_cache(cached, {**entry, "sha256": _MEMO[key]})
    return _MEMO[key]


def _write_cache(path: Path, entry: dict[str, Any]) -> None:
    """Best effort and atomic: a cache that cannot be written costs a re-hash, nothing else."""
    try:
        atomic_replace(path, lambda tmp: tmp.write_text(json.dumps(entry), encoding="utf-8"))
    except OSError:
        return


def model_identity(path_or_id: str) -> dict[str, Any]:
    """A model's identity: file name, size, sha256 and weight bytes for local files; the id
    alone for hub names."""
    path = Path(path_or_id)
    if path.is_dir():
        weights = safetensors_weights(path)
        files = folder_files(path)
        digest = folder_sha256(files) if files else None
        size = sum(f.stat().st_size for f in files) or None
        return {"id": path.name, "path": str(path), "sha256": digest, "size": size,
                "weights": weights}  # fmt: skip
    if not path.is_file():
        return {"id": path_or_id, "sha256": None, "size": None}
    out: dict[str, Any] = {
        "id": path.name,
        "path": str(path),
        "sha256": file_sha256(path),
        "size": path.stat().st_size,
    }
    if path.suffix == ".gguf":
        try:
            out["weights"] = gguf_weights(path)
        except ModelFileError as exc:
            out["weights"] = {"bytes_per_token": None, "reason": str(exc)}
    return out


def folder_files(folder: Path) -> list[Path]:
    """What defines a Hugging Face model folder: its config and its weights."""
    return sorted([*folder.glob("*.safetensors"), *folder.glob("config.json")])


def folder_sha256(files: list[Path]) -> str:
    """One digest for a model folder's ``folder_files``: the sha256 of "name sha256" lines
    (each file hashed once and cached, as single files are)."""
    lines = "".join(f"{f.name} {file_sha256(f)}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


# ------------------------------------------------------------------------------- GGUF


def _read(fh: BinaryIO, fmt: str, path: Path) -> Any:
    size = struct.calcsize("<" + fmt)
    raw = fh.read(size)
    if len(raw) != size:
        raise ModelFileError(f"{path}: GGUF header ends early (truncated file?)")
    return struct.unpack("<" + fmt, raw)[0]


def _read_string(fh: BinaryIO, path: Path) -> str:
    length = _read(fh, "Q", path)
    raw = fh.read(length)
    if len(raw) != length:
        raise ModelFileError(f"{path}: GGUF header ends early (truncated file?)")
    return raw.decode("utf-8", errors="replace")


def _read_value(fh: BinaryIO, vtype: int, path: Path, keep: bool) -> Any:
    """One metadata value; arrays are skipped (returned as None) unless ``keep``."""
    if vtype in _FIXED:
        return _read(fh, _FIXED[vtype], path)
    if vtype == _STRING:
        return _read_string(fh, path)
    if vtype != _ARRAY:
        raise ModelFileError(f"{path}: unknown GGUF value type {vtype}")
    etype, count = _read(fh, "I", path), _read(fh, "Q", path)
    if etype in _FIXED and not keep:
        fh.seek(struct.calcsize("<" + _FIXED[etype]) * count, os.SEEK_CUR)
        return None
    values = [_read_value(fh, etype, path, keep) for _ in range(count)]
    return values if keep else None


def read_gguf_header(path: Path) -> dict[str, Any]:
    """Scalar metadata and tensor infos (name, dims, type, offset) of a GGUF file."""
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise ModelFileError(f"{path} is not a GGUF file (no GGUF magic)")
        version = _read(fh, "I", path)
        if version < 2:
            raise ModelFileError(f"{path}: GGUF version {version} is too old (need 2 or later)")
        n_tensors, n_kv = _read(fh, "Q", path), _read(fh, "Q", path)
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = _read_string(fh, path)
            value = _read_value(fh, _read(fh, "I", path), path, keep=False)
            if value is not None:
                metadata[key] = value
        tensors = []
        for _ in range(n_tensors):
            name = _read_string(fh, path)
            dims = [_read(fh, "Q", path) for _ in range(_read(fh, "I", path))]
            tensors.append(
                {"name": name, "dims": dims, "type": _read(fh, "I", path),
                 "offset": _read(fh, "Q", path)}
            )  # fmt: skip
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = -(-fh.tell() // alignment) * alignment
    return {"version": version, "metadata": metadata, "tensors": tensors, "data_start": data_start}


def gguf_tensor_bytes(path: Path) -> dict[str, int]:
    """Bytes of each tensor: the distance to the next tensor's data (padding included, at most
    the alignment, 32 bytes by default)."""
    header = read_gguf_header(path)
    data_size = path.stat().st_size - header["data_start"]
    ordered = sorted(header["tensors"], key=lambda t: t["offset"])
    ends = [t["offset"] for t in ordered[1:]] + [data_size]
    out = {}
    for tensor, end in zip(ordered, ends, strict=True):
        size = end - tensor["offset"]
        if size < 0 or end > data_size:
            raise ModelFileError(f"{path}: tensor {tensor['name']} lies outside the file")
        out[tensor["name"]] = size
    return out


def gguf_weights(path: Path) -> dict[str, Any]:
    """Weight bytes of a GGUF model, and those one decoded token reads."""
    sizes = gguf_tensor_bytes(path)
    total = sum(sizes.values())
    gathered = "token_embd.weight" in sizes and "output.weight" in sizes
    per_token = total - (sizes["token_embd.weight"] if gathered else 0)
    note = (
        "token_embd.weight excluded (gathered one row per token; output.weight is the head)"
        if gathered
        else "every tensor counted (the token embedding doubles as the output head)"
    )
    if any("_exps" in name for name in sizes):
        note += "; mixture-of-experts tensors counted in full: an upper bound"
    return {"format": "gguf", "total_bytes": total, "bytes_per_token": per_token,
            "n_tensors": len(sizes), "note": note}  # fmt: skip


def safetensors_weights(folder: Path) -> dict[str, Any]:
    """Weight bytes of a Hugging Face folder: its ``*.safetensors`` files, all counted."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return {"bytes_per_token": None, "reason": f"no *.safetensors files in {folder}"}
    total = sum(f.stat().st_size for f in files)
    return {"format": "safetensors", "total_bytes": total, "bytes_per_token": total,
            "n_files": len(files),
            "note": "file sizes, embedding table included: an upper bound"}  # fmt: skip
