"""Where SGLang's speculative decode speed moves between server boots, measured inside one boot.

Each setting is booted once. Inside the boot, the placement of every prompt's cached prefix
in the KV pool is moved on purpose: for each shift S, ``/flush_cache`` resets the pool (its
free list back to slot 1, 2, 3, ...), a dummy request of S tokens takes the first S slots and
stays in the radix cache, and then each prompt is warmed up once and measured ``--runs`` times.
If a prompt's speed depends on where its prefix lands (the per-boot levels seen between boots:
the health checks and the warm-up before it take a boot-dependent number of slots), it moves
with S here, inside one boot. SGLang's own device timer
(``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``, counter ``sglang:forward_execution_seconds_total``)
splits each run's GPU time into target verify, draft decode and the draft extend (``extend``
in eager mode, ``eagle_draft_extend`` where a CUDA graph runs it).

Every prompt decodes ``--max-tokens`` tokens (``ignore_eos``), rendered with the target's own
chat template. Prints one line per (setting, shift, prompt) and a spread summary per setting.

    python bench/sglang_noise.py --python $SPECDEC_SGLANG_PYTHON --target T.hf --draft D.hf \\
        --setting fa3= --setting triton-draft=--speculative-draft-attention-backend,triton \\
        --out noise.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pytest_specdec.core.workloads import load_workload  # noqa: E402

ALGORITHMS = {  # the suite's presets (pytest_specdec/presets/sglang.toml)
    "standalone-d16": ["--speculative-algorithm", "STANDALONE", "--speculative-num-steps", "16",
                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "17"],
    "ngram": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
    "eagle3": ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
    "dflash-b16": ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16",
                   "--speculative-dflash-block-size", "16"],
    "baseline": [],
}  # fmt: skip
SUITE_ARGS = [
    "--dtype", "float16", "--mem-fraction-static", "0.4", "--context-length", "4096",
    "--max-running-requests", "4", "--cuda-graph-max-bs-decode", "4",
    "--disable-prefill-cuda-graph", "--sampling-backend", "pytorch",
]  # fmt: skip
PHASE = re.compile(r"^sglang:forward_execution_seconds_total\{(?P<labels>[^}]*)\} (?P<v>\S+)$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def phases(client: httpx.Client) -> dict[str, float]:
    """Seconds of GPU time so far per forward category (summed over the other labels)."""
    out: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        found = PHASE.match(line)
        if found:
            category = re.search(r'category="([^"]+)"', found["labels"])
            key = category.group(1) if category else "?"
            out[key] = out.get(key, 0.0) + float(found["v"])
    return out


def generate(client: httpx.Client, payload: dict[str, Any]) -> dict[str, Any]:
    """One streamed /generate: wall and first-token times, the last event's meta_info."""
    start = time.perf_counter()
    first = None
    last: dict[str, Any] = {}
    with client.stream("POST", "/generate", json={**payload, "stream": True}) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if first is None and event.get("text"):
                first = time.perf_counter() - start
            last = event
    wall = time.perf_counter() - start
    meta = last.get("meta_info", {})
    tokens = int(meta.get("completion_tokens", 0))
    decode = (tokens - 1) / (wall - first) if first is not None and tokens > 1 else math.nan
    return {"wall_s": wall, "ttft_s": first, "tokens": tokens, "decode_tok_s": decode,
            "verify": meta.get("spec_verify_ct"), "text": last.get("text", "")}  # fmt: skip


def render(target: str, messages: list[dict[str, str]]) -> str:
    from transformers import AutoTokenizer  # the runner's own, only for the template

    tok = AutoTokenizer.from_pretrained(target)
    return str(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def boot(args: argparse.Namespace, name: str, extra: list[str], log: Path) -> tuple[Any, str]:
    port = free_port()
    argv = [args.python, "-m", "sglang.launch_server", "--model-path", args.target,
            "--host", "127.0.0.1", "--port", str(port), "--enable-metrics", *SUITE_ARGS,
            *ALGORITHMS[args.algorithm], *extra]  # fmt: skip
    if args.draft:
        argv += ["--speculative-draft-model-path", args.draft]
    env = {**os.environ, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    while time.monotonic() - start < args.boot_timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{name}: SGLang exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health_generate", timeout=10).status_code == 200:
                print(f"[{name}] ready in {time.monotonic() - start:.1f} s", flush=True)
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name}: not ready after {args.boot_timeout} s")


def stop(proc: Any) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def flush(client: httpx.Client) -> None:
    """/flush_cache: radix tree, request pool, KV allocator (and NGRAM's store) reset."""
    for _ in range(50):
        if client.post("/flush_cache").status_code == 200:
            return
        time.sleep(0.1)  # 400 while a request still runs
    raise RuntimeError("/flush_cache kept answering busy")


def measured(client: httpx.Client, text: str, params: dict[str, Any]) -> dict[str, Any]:
    """One measured request, with the GPU time of each forward phase it caused."""
    before = phases(client)
    out = generate(client, {"text": text, "sampling_params": params})
    after = phases(client)
    spent = {k: after[k] - before.get(k, 0.0) for k in after}
    verify = out["verify"] or 0
    return {
        **{k: v for k, v in out.items() if k != "text"},
        "accept_length": out["tokens"] / verify if verify else None,
        "ms_per_step": {k: 1e3 * v / verify for k, v in spent.items() if v > 0 and verify},
    }


def run_boot(
    args: argparse.Namespace, name: str, extra: list[str], texts: dict[str, str], boot_no: int
) -> list[dict[str, Any]]:
    """One boot: per shift, the KV pool reset and S slots taken, then every prompt warmed up
    and measured (with --flush-each-run: every request after a flush, no warm-up)."""
    log = Path(args.out).with_suffix(f".{name}-boot{boot_no}.log")
    started = time.monotonic()
    proc, url = boot(args, name, extra, log)
    ready_s = time.monotonic() - started
    rows: list[dict[str, Any]] = []
    params = {"temperature": 0, "max_new_tokens": args.max_tokens, "ignore_eos": True}
    tag = {"setting": name, "boot": boot_no, "ready_s": ready_s}
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            for shift in args.shifts:
                flush(client)
                if shift:
                    dummy = [100 + i % 1000 for i in range(shift)]
                    one = {"temperature": 0, "max_new_tokens": 1}
                    generate(client, {"input_ids": dummy, "sampling_params": one})
                for pid, text in texts.items():
                    if not args.flush_each_run:
                        generate(client, {"text": text, "sampling_params": params})  # warm-up
                    for run in range(args.runs):
                        if args.flush_each_run:
                            flush(client)
                        row = measured(client, text, params)
                        rows.append({**tag, "shift": shift, "prompt": pid, "run": run, **row})
                    print(line(name, boot_no, shift, pid, rows), flush=True)
            if args.also_flushed:  # shift -1: each request after a flush, no warm-up
                for pid, text in texts.items():
                    for run in range(args.runs):
                        flush(client)
                        row = measured(client, text, params)
                        rows.append({**tag, "shift": -1, "prompt": pid, "run": run, **row})
                    print(line(name, boot_no, -1, pid, rows), flush=True)
    finally:
        stop(proc)
    return rows


def line(name: str, boot_no: int, shift: int, pid: str, rows: list[dict[str, Any]]) -> str:
    """One (setting, boot, shift, prompt): mean decode tok/s, its runs, accept length, and ms
    per verify step by phase (the last run's)."""
    last = [r for r in rows if r["shift"] == shift and r["prompt"] == pid]
    speeds = ", ".join(f"{r['decode_tok_s']:.0f}" for r in last)
    mean = statistics.mean(r["decode_tok_s"] for r in last)
    accept = last[-1]["accept_length"]
    steps = " ".join(f"{k} {v:.2f}" for k, v in sorted(last[-1]["ms_per_step"].items()))
    return (
        f"[{name} #{boot_no}] shift {shift:4d} {pid:11} decode {mean:7.1f} tok/s (runs {speeds})"
        f", accept {accept if accept is None else round(accept, 2)}, ms/step {steps}"
    )


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per setting and prompt: the spread of the per-shift means against the spread of runs
    within a shift (CV, %)."""
    lines = []
    for name in dict.fromkeys(r["setting"] for r in rows):
        for pid in dict.fromkeys(r["prompt"] for r in rows):
            mine = [r for r in rows if r["setting"] == name and r["prompt"] == pid]
            cells = sorted({(r["boot"], r["shift"]) for r in mine})
            groups = [[r["decode_tok_s"] for r in mine if (r["boot"], r["shift"]) == c]
                      for c in cells]  # fmt: skip
            means = [statistics.mean(g) for g in groups]
            within = [statistics.stdev(g) / m for g, m in zip(groups, means, strict=True)
                      if len(g) > 1]  # fmt: skip
            between = statistics.stdev(means) / statistics.mean(means) if len(means) > 1 else 0
            inside = 100 * statistics.mean(within) if within else math.nan
            lines.append(
                f"{name:14} {pid:11} per-(boot, shift) means {min(means):6.1f}-{max(means):6.1f}"
                f" tok/s over {len(means)}, CV between them {100 * between:5.1f}%, of runs "
                f"within one {inside:4.1f}%"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with SGLang")
    parser.add_argument("--target", required=True)
    parser.add_argument(
        "--draft", default=None, help="the draft model (standalone-d16, eagle3, dflash-b16)"
    )
    parser.add_argument("--setting", action="append", default=[],
                        help="NAME=FLAG,VALUE,...: extra SGLang flags of one boot")  # fmt: skip
    parser.add_argument("--shifts", type=lambda s: [int(x) for x in s.split(",")],
                        default=[0, 1, 5, 17, 64, 255, 1000])  # fmt: skip
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--workload", default="seed")
    parser.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="standalone-d16")
    parser.add_argument("--boots", type=int, default=1, help="boots per setting")
    parser.add_argument(
        "--flush-each-run",
        action="store_true",
        help="flush before every request, no warm-up (NGRAM without recall)",
    )
    parser.add_argument(
        "--also-flushed",
        action="store_true",
        help="after the shifts, every prompt again with a flush before each request (shift -1)",
    )
    parser.add_argument("--boot-timeout", type=float, default=600)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    workload = load_workload(args.workload)
    texts = {p.id: render(args.target, [m.to_dict() for m in p.messages])
             for p in workload.prompts}  # fmt: skip
    rows: list[dict[str, Any]] = []
    for setting in args.setting or ["default="]:
        name, _, flags = setting.partition("=")
        for boot_no in range(1, args.boots + 1):
            rows += run_boot(args, name, [f for f in flags.split(",") if f], texts, boot_no)
            Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))
    for line in summary(rows):
        print(line)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
