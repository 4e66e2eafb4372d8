"""A model folder's files: ``model.safetensors``, written tensor by tensor in the order its
header declares (a 14.8 GB target never has to fit in memory) and published atomically, read
back as views of the file; and its JSON files (``config.json``, the ``specdec-model.json``
sidecar of recipe, size and sha256), each written whole or not at all.

The base of the lab: it imports nothing of it.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

SAFETENSORS = "model.safetensors"
SIDECAR = "specdec-model.json"
_DTYPES: dict[np.dtype[Any], str] = {
    np.dtype(np.float16): "F16",
    np.dtype(np.float32): "F32",
    np.dtype(np.int64): "I64",
    np.dtype(np.bool_): "BOOL",
}


class LayoutError(ValueError):
    """A tensor or file that does not fit the layout: the message names it."""


class SafetensorsWriter:
    """Writes one safetensors file tensor by tensor, in the order its header declares."""

    def __init__(
        self,
        path: Path,
        entries: Sequence[tuple[str, tuple[int, ...], np.dtype[Any]]],
        metadata: Mapping[str, str],
    ) -> None:
        header: dict[str, Any] = {"__metadata__": dict(metadata)}
        offset = 0
        self._expected = []
        for name, shape, dtype in entries:
            if np.dtype(dtype) not in _DTYPES:
                raise LayoutError(f"tensor {name}: dtype {dtype} is not one of {_DTYPES}")
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            header[name] = {
                "dtype": _DTYPES[np.dtype(dtype)],
                "shape": list(shape),
                "data_offsets": [offset, offset + nbytes],
            }
            self._expected.append((name, tuple(shape), np.dtype(dtype)))
            offset += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self.path = path
        self._part = path.with_name(path.name + ".part")
        self._fh: BinaryIO = self._part.open("wb")
        self._fh.write(struct.pack("<Q", len(text)) + text)
        self._next = 0

    def write(self, name: str, array: np.ndarray) -> None:
        want = self._expected[self._next]
        if (name, tuple(array.shape), array.dtype) != want:
            raise LayoutError(
                f"tensor {self._next}: got {name} {array.shape} {array.dtype}, header says {want}"
            )
        self._fh.write(memoryview(np.ascontiguousarray(array)).cast("B"))  # type: ignore[arg-type]
        self._next += 1

    def close(self) -> None:
        if self._next != len(self._expected):
            self._fh.close()
            raise LayoutError(f"{self.path}: {self._next} of {len(self._expected)} tensors written")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self._part, self.path)

    def abort(self) -> None:
        self._fh.close()
        self._part.unlink(missing_ok=True)


def read_safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of a safetensors file, as read-only views of the file."""
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + length)
    names = {v: k for k, v in _DTYPES.items()}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        yield name, data[start:end].view(names[info["dtype"]]).reshape(info["shape"])


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(part, path)
