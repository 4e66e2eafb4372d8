"""Model identity (sha256, cached across runs) and weight bytes from real GGUF headers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_specdec.core import modelfile
from pytest_specdec.core.modelfile import (
    ModelFileError,
    file_sha256,
    gguf_tensor_bytes,
    gguf_weights,
    model_identity,
    read_gguf_header,
)


def write_gguf(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    """A small llama GGUF written by llama.cpp's own writer (the gguf package)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_block_count(1)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_real_smollm2_tensor_bytes_fill_the_data_section(smollm2_gguf: Path) -> None:
    header = read_gguf_header(smollm2_gguf)
    sizes = gguf_tensor_bytes(smollm2_gguf)
    assert header["version"] == 3 and len(sizes) == 272
    assert header["metadata"]["llama.block_count"] == 30
    assert sum(sizes.values()) == smollm2_gguf.stat().st_size - header["data_start"]
    assert sizes["blk.0.ffn_gate.weight"] == 576 * 1536 // 32 * 20  # Q4_1: 20 bytes per 32


def test_tied_embedding_is_read_every_token(smollm2_gguf: Path) -> None:
    weights = gguf_weights(smollm2_gguf)
    assert weights["bytes_per_token"] == weights["total_bytes"] == 96_576_768
    assert "doubles as the output head" in weights["note"]


def test_a_separate_output_head_leaves_the_embedding_out(tmp_path: Path) -> None:
    embd = np.ones((1000, 64), dtype=np.float16)
    path = write_gguf(
        tmp_path / "m.gguf",
        {
            "token_embd.weight": embd,
            "blk.0.ffn_up.weight": np.ones((128, 64), dtype=np.float16),
            "output.weight": np.ones((1000, 64), dtype=np.float16),
        },
    )
    weights = gguf_weights(path)
    assert weights["total_bytes"] == 2 * 1000 * 64 * 2 + 128 * 64 * 2
    assert weights["bytes_per_token"] == weights["total_bytes"] - embd.nbytes
    assert "token_embd.weight excluded" in weights["note"]


def test_truncated_and_foreign_files_are_errors_naming_the_file(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_gguf.read_bytes()[:100_000])  # inside the tokenizer metadata
    with pytest.raises(ModelFileError, match=r"cut\.gguf: GGUF header ends early"):
        gguf_weights(cut)
    foreign = tmp_path / "x.gguf"
    foreign.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelFileError, match=r"x\.gguf is not a GGUF file"):
        gguf_weights(foreign)
    identity = model_identity(str(foreign))
    assert identity["sha256"] and identity["weights"]["bytes_per_token"] is None
    assert "not a GGUF file" in identity["weights"]["reason"]


def test_digest_is_cached_on_disk_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.bin"
    model.write_bytes(b"weights" * 1000)
    calls: list[Path] = []

    def digest(path: Path) -> str:
        calls.append(path)
        return modelfile.sha256_of(path)

    first = file_sha256(model, digest)
    monkeypatch.setattr(modelfile, "_MEMO", {})  # a new process: only the disk cache is left
    assert file_sha256(model, digest) == first and len(calls) == 1
    assert list((tmp_path / "cache" / "sha256").glob("*.json"))
    model.write_bytes(b"other weights" * 1000)  # new size and mtime: hashed again
    monkeypatch.setattr(modelfile, "_MEMO", {})
    assert file_sha256(model, digest) != first and len(calls) == 2


def test_a_corrupt_cache_entry_costs_a_rehash_not_a_wrong_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.bin"
    model.write_bytes(b"abc")
    expected = modelfile.sha256_of(model)
    assert file_sha256(model) == expected
    (entry,) = (tmp_path / "cache" / "sha256").glob("*.json")
    entry.write_text("{not json")
    monkeypatch.setattr(modelfile, "_MEMO", {})
    assert file_sha256(model) == expected


def test_identity_of_hub_ids_and_safetensors_folders(tmp_path: Path) -> None:
    assert model_identity("Qwen/Qwen3-8B") == {"id": "Qwen/Qwen3-8B", "sha256": None, "size": None}
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model-00001.safetensors").write_bytes(b"x" * 300)
    (folder / "model-00002.safetensors").write_bytes(b"x" * 200)
    (folder / "config.json").write_text("{}")
    identity = model_identity(str(folder))
    assert identity["id"] == "hf" and identity["weights"]["bytes_per_token"] == 500
    assert identity["size"] == 502 and len(identity["sha256"]) == 64
    moved = tmp_path / "elsewhere" / "hf"
    shutil.copytree(folder, moved)
    assert model_identity(str(moved))["sha256"] == identity["sha256"]  # its files, not its path
    (moved / "config.json").write_text('{"x": 1}')
    assert model_identity(str(moved))["sha256"] != identity["sha256"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no *.safetensors" in model_identity(str(empty))["weights"]["reason"]
