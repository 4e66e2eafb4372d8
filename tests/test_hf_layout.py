"""Hugging Face layout of GGUF models (specdec_lab/models/hf_layout.py, gguf-to-hf,
make-memory-bound-models --format hf) and SGLang's drafters from a seed (make-sglang-drafters).

The weights are checked tensor by tensor against the GGUF, the query/key row order against
llama.cpp's converter, and the tokenizer against the real llama-server's own /tokenize.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests_support import SMOLLM2_GGUF

from pytest_specdec.core.modelfile import model_identity
from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.engines import EngineNotInstalled, make_engine
from pytest_specdec.engines.scripts import cache_dir
from specdec_lab.cli.memory_bound_models import parser as models_parser
from specdec_lab.drafters import layout
from specdec_lab.formats import folder
from specdec_lab.models import hf_layout
from specdec_lab.models import memory_bound as mbm
from specdec_lab.training.make import target_identity

REPO = Path(__file__).resolve().parent.parent
LAB_ENV = {**os.environ, "PYTHON": sys.executable}  # the scripts' interpreter: this one


def llamacpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py row order for q/k (the direction it writes)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def test_unpermute_undoes_llamacpps_rotary_row_order() -> None:
    hf = np.arange(9 * 64 * 4, dtype=np.float32).reshape(9 * 64, 4)
    assert np.array_equal(hf_layout.unpermute(llamacpp_permute(hf, 9), 9), hf)
    assert not np.array_equal(llamacpp_permute(hf, 9), hf)
    with pytest.raises(folder.LayoutError, match="do not split into 4 heads"):
        hf_layout.unpermute(np.zeros((6, 2)), 4)


def test_names_map_and_foreign_tensors_are_refused() -> None:
    assert hf_layout.hf_name("blk.7.attn_k.weight") == "model.layers.7.self_attn.k_proj.weight"
    assert hf_layout.hf_name("output_norm.weight") == "model.norm.weight"
    with pytest.raises(folder.LayoutError, match=r"'blk\.0\.ffn_gate_exps\.weight'"):
        hf_layout.hf_name("blk.0.ffn_gate_exps.weight")


def test_safetensors_writer_publishes_whole_files_only(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    a = np.arange(6, dtype=np.float16).reshape(2, 3)
    b = np.array([True, False])
    entries = [("a", a.shape, a.dtype), ("b", b.shape, b.dtype)]
    writer = folder.SafetensorsWriter(path, entries, {"format": "pt"})
    with pytest.raises(folder.LayoutError, match="header says"):
        writer.write("b", b)  # out of order
    writer.write("a", a)
    with pytest.raises(folder.LayoutError, match="1 of 2 tensors written"):
        writer.close()
    assert not path.exists()  # a half-written file is never published
    writer = folder.SafetensorsWriter(path, entries, {"format": "pt"})
    writer.write("a", a)
    writer.write("b", b)
    writer.close()
    back = dict(folder.read_safetensors(path))
    assert np.array_equal(back["a"], a) and np.array_equal(back["b"], b)
    assert not list(tmp_path.glob("*.part"))


def test_smollm2_in_hf_layout_has_the_ggufs_weights(smollm2_gguf: Path, smollm2_hf: Path) -> None:
    report = hf_layout.verify(smollm2_gguf, smollm2_hf)
    assert report["equal"] and report["tensors"] == 272 and not report["extra_in_hf"]
    config = json.loads((smollm2_hf / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        576, 30, 49152)  # fmt: skip
    assert config["num_key_value_heads"] == 3 and config["tie_word_embeddings"] is True
    ident = model_identity(str(smollm2_hf))
    assert ident["sha256"] and ident["weights"]["total_bytes"] > 2e8


def test_verify_finds_a_changed_tensor(
    smollm2_gguf: Path, smollm2_hf: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "changed"
    copy.mkdir()
    raw = bytearray((smollm2_hf / folder.SAFETENSORS).read_bytes())
    raw[-1] ^= 0xFF  # the last byte of the last tensor
    (copy / folder.SAFETENSORS).write_bytes(bytes(raw))
    report = hf_layout.verify(smollm2_gguf, copy)
    assert not report["equal"] and len(report["mismatched"]) == 1
    cli = [str(REPO / "scripts" / "gguf-to-hf"), "--verify", str(smollm2_gguf), str(copy)]
    assert subprocess.run(cli, capture_output=True, check=False, env=LAB_ENV).returncode == 1


@pytest.mark.engine
def test_the_tokenizer_gives_llamacpps_token_ids(
    smollm2_hf: Path, llama_server: Path, tmp_path: Path
) -> None:
    """Every prompt of the seed workload, tokenized by tokenizer.json and by llama-server."""
    from tokenizers import Tokenizer  # type: ignore[import-untyped]

    tokenizer = Tokenizer.from_file(str(smollm2_hf / "tokenizer.json"))
    texts = [p.text() for p in load_workload("seed").prompts]
    texts += ["12345 + 678 = ?", "  two  spaces\tand\nlines", "<|im_start|>user\nhé<|im_end|>"]
    with smollm2_server(llama_server, tmp_path) as client:
        for text in texts:
            theirs = client.post("/tokenize", json={"content": text, "parse_special": True})
            ours = tokenizer.encode(text, add_special_tokens=False).ids
            assert ours == theirs.json()["tokens"], text


@contextlib.contextmanager
def smollm2_server(llama_server: Path, tmp_path: Path) -> Iterator[httpx.Client]:
    """llama-server on the real SmolLM2 GGUF, and a client of it, until the block ends."""
    port = 18000 + (abs(hash(str(tmp_path))) % 2000)
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(llama_server), "-m", str(SMOLLM2_GGUF), "--port", str(port), "-t", "1", "-c", "512"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            _wait_ready(client, proc)
            yield client
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def _wait_ready(client: httpx.Client, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited with {proc.returncode}")
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        subprocess.run(["sleep", "0.1"], check=True)
    raise AssertionError("llama-server not ready in 60 s")


def test_one_pass_writes_both_layouts_with_the_same_weights(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    recipe = mbm.draft_recipe(smollm2_gguf, 64, 0.3, seed=7)
    gguf, record, made = mbm.make(smollm2_gguf, tmp_path, recipe, jobs=1, formats=("gguf", "hf"))
    hf = mbm.hf_dir_for(gguf)
    assert made and hf.name == "mb-smollm2-draft-138m-s0.3-seed7.hf"
    assert hf_layout.verify(gguf, hf)["equal"]
    sidecar = json.loads((hf / folder.SIDECAR).read_text())
    assert sidecar["recipe"] == record["recipe"] and sidecar["sha256"] == record["sha256"]
    config = json.loads((hf / "config.json").read_text())
    assert config["intermediate_size"] == 1536 + 64
    # the HF layout alone, made later, is the same bytes (the generator is deterministic)
    _, again, made_again = mbm.make(
        smollm2_gguf, tmp_path / "later", recipe, jobs=1, formats=("hf",)
    )
    assert made_again and again["hf"]["sha256"] == record["hf"]["sha256"]
    # a drafter distilled from either folder records the same weights as its target
    later = mbm.hf_dir_for(tmp_path / "later" / gguf.name)
    weights = again["hf"]["sha256"]
    assert target_identity(hf)["sha256"] == target_identity(later)["sha256"] == weights
    _, _, cached = mbm.make(smollm2_gguf, tmp_path, recipe, jobs=1, formats=("gguf", "hf"))
    assert not cached


def test_formats_flag_names_the_choices() -> None:
    with pytest.raises(SystemExit):
        models_parser().parse_args(["--format", "onnx"])
    assert models_parser().parse_args(["--format", "hf,gguf,hf"]).format == ("hf", "gguf")


# --- drafters for SGLang's own algorithms ------------------------------------------------------

TARGET: dict[str, Any] = {
    "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "num_hidden_layers": 30, "vocab_size": 49152, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip


def test_dflash_drafter_has_what_sglang_reads() -> None:
    config, shapes = layout.dflash(TARGET, block_size=16, ffn=1536)
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["hidden_size"] == TARGET["hidden_size"] and config["num_target_layers"] == 30
    ids = config["dflash_config"]["target_layer_ids"]
    assert all(0 <= i <= 28 for i in ids)  # captured "before layer id+1": never the last
    assert 0 <= config["dflash_config"]["mask_token_id"] < TARGET["vocab_size"]
    assert shapes["fc.weight"] == (576, 576 * len(ids))
    assert shapes["layers.0.self_attn.k_proj.weight"] == (192, 576)
    assert shapes["layers.0.self_attn.q_norm.weight"] == (64,)
    assert "lm_head.weight" not in shapes and "embed_tokens.weight" not in shapes


def test_eagle3_drafter_has_what_sglang_reads() -> None:
    config, shapes = layout.eagle3(TARGET, ffn=1536)
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == 49152  # read with no default
    ids = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [1, 14, 26] and shapes["fc.weight"] == (576, 3 * 576)
    assert shapes["midlayer.self_attn.q_proj.weight"] == (576, 2 * 576)
    assert shapes["lm_head.weight"] == (49152, 576) and shapes["d2t"] == (49152,)


def test_drafters_are_the_same_bytes_from_the_same_seed(tmp_path: Path) -> None:
    target = tmp_path / "t.hf"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET))
    cli = [str(REPO / "scripts" / "make-sglang-drafters"), "--target", str(target)]
    for out in ("a", "b"):
        proc = subprocess.run([*cli, "--out", str(tmp_path / out)], capture_output=True,
                              text=True, check=False, env=LAB_ENV)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    for name in ("t.dflash-b16-seed1.hf", "t.eagle3-seed1.hf"):
        a, b = (json.loads((tmp_path / d / name / folder.SIDECAR).read_text()) for d in "ab")
        assert a["sha256"] == b["sha256"] and a["params"] > 1e6
        d2t = dict(folder.read_safetensors(tmp_path / "a" / name / folder.SAFETENSORS))
        if "d2t" in d2t:
            assert not d2t["d2t"].any() and d2t["t2d"].all()  # the identity map
    other = subprocess.run([*cli, "--out", str(tmp_path / "c"), "--seed", "2"],
                           capture_output=True, check=False, env=LAB_ENV)  # fmt: skip
    assert other.returncode == 0
    c = json.loads((tmp_path / "c" / "t.eagle3-seed2.hf" / folder.SIDECAR).read_text())
    first = json.loads((tmp_path / "a" / "t.eagle3-seed1.hf" / folder.SIDECAR).read_text())
    assert c["sha256"] != first["sha256"]


def test_drafters_refuse_a_target_without_config(tmp_path: Path) -> None:
    cli = [str(REPO / "scripts" / "make-sglang-drafters"), "--target", str(tmp_path)]
    proc = subprocess.run(cli, capture_output=True, text=True, check=False, env=LAB_ENV)
    assert proc.returncode != 0 and "config.json does not exist" in proc.stderr


def test_sglang_renders_the_prompts_as_llama_cpp_applies_the_chat_template(
    smollm2_hf: Path,
    llama_server: Path,
    sglang_python: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SGLang adapter renders the prompts it sends to the native /generate endpoint with
    the model's own tokenizer and chat template, in SGLang's interpreter: for SmolLM2 the text
    is what llama-server's /apply-template makes of the same GGUF's template, for every
    prompt of the seed and multi-turn workloads; a tokenizer without a template is sent the
    plain text and the rendering says so; through the chat endpoint nothing is rendered. A
    rendering is kept while its inputs stay the same: a tokenizer changed in place is
    rendered anew."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    engine = make_engine("sglang", EngineSettings(python=sglang_python, api="native"))
    conversations = [
        [m.to_dict() for m in p.messages] for p in load_workload("seed,multi_turn").prompts
    ]
    rendering = engine.render(str(smollm2_hf), conversations)
    assert rendering.kind == "chat-template" and rendering.texts is not None
    assert rendering.how.endswith("chat template (transformers 5.12.1)")
    with smollm2_server(llama_server, tmp_path) as client:
        for messages, text in zip(conversations, rendering.texts, strict=True):
            theirs = client.post("/apply-template", json={"messages": messages}).json()
            assert text == theirs["prompt"], messages[-1]["content"][:40]
    assert rendering.texts[0].endswith("<|im_start|>assistant\n")
    bare = tmp_path / "no-template"
    shutil.copytree(smollm2_hf, bare, ignore=shutil.ignore_patterns("*.safetensors"))
    kept = engine.render(str(bare), conversations[:1])
    assert kept.kind == "chat-template" and len(list(cache_dir().glob("*.json"))) == 2
    config = json.loads((bare / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    plain = engine.render(str(bare), conversations[:1])
    assert plain.kind == "plain" and plain.texts is None and "no chat template" in plain.how
    assert engine.render(str(smollm2_hf), conversations).texts == rendering.texts
    chat = make_engine("sglang", EngineSettings(python=sglang_python, api="chat"))
    assert chat.render(str(smollm2_hf), conversations).kind == "chat-endpoint"
    with pytest.raises(EngineNotInstalled, match=r"cannot render the prompts with .*; give it"):
        engine.render(str(tmp_path / "missing"), conversations[:1])
