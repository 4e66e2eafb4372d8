"""SGLang: the primary GPU target (DFlash, DDTree, EAGLE/EAGLE3, STANDALONE, NGRAM).

Facts used: launch with ``python -m sglang.launch_server``; readiness is ``/health_generate``
(a real one-token generation; ``/v1/models`` answers before warmup ends, so it is never used);
per-request speculative stats only come from the native ``/generate`` endpoint's ``meta_info``;
``--enable-metrics`` exposes ``sglang:spec_verify_calls_total`` and
``sglang:generation_tokens_total``, whose deltas around a run give its accept length.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.core.results import RunRecord, meta_info_rates
from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.base import (
    BootContext,
    EngineBase,
    EngineNotInstalled,
    LaunchSpec,
    Rendering,
    RequestSpec,
    counter_delta,
    finish_spec,
    finite_or_none,
    flag_int,
    stream_chat,
    write_private,
)
from pytest_specdec.engines.lint import Finding, key_yaml_name, lint_sglang, lint_sglang_load
from pytest_specdec.engines.scripts import ScriptFailed, run_script_cached, tokenizer_files
from pytest_specdec.measure.client import RequestFailed, get, stream_sse
from pytest_specdec.measure.levels import LoadLimits

VERIFY_CALLS = "sglang:spec_verify_calls_total"
FLUSH_TRIES, FLUSH_WAIT_S = 50, 0.1  # /flush_cache answers 400 while a request runs
RENDER_TIMEOUT_S = 120.0  # loading a tokenizer, in SGLang's interpreter
GEN_TOKENS = "sglang:generation_tokens_total"
META_FIELDS = (
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_correct_drafts_histogram",
)
# The scheduler's periodic line (every --decode-log-interval decode steps, 40 by default):
# "Decode batch, #running-req: 8, ..., cuda graph: True, gen throughput (token/s): 1433.21,
# #queue-req: 0" (SGLang 0.5.17, scheduler_components/metrics_reporter.py).
DECODE_LINE = re.compile(
    r"Decode batch.*?#running-req: (?P<running>\d+).*?(?:cuda|cpu|npu|musa) graph: "
    r"(?P<graph>True|False).*?gen throughput \(token/s\): (?P<tput>[\d.]+)"
    r"(?:.*?#queue-req: (?P<queue>\d+))?"
)
# Its line for every prefill batch: "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 147,
# ..., cuda graph: False, ..." (SGLang 0.5.17). A prefill runs in a captured graph only when its
# new tokens pad to a captured size at most twice as large (prefill_cuda_graph_runner.py), so
# with the default sizes (4, 8, 12, ...) a single new token, the usual prefill under load after
# a cached prompt, runs eagerly.
PREFILL_LINE = re.compile(r"Prefill batch.*?#new-token: (?P<tokens>\d+)[^\n]*")
# With --gc-warning-threshold-secs S its HTTP server's process logs every collection longer than S:
# "LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.4521s | # Objects: ..." (0.5.17,
# utils/common.py). While it collects, that process serves nothing: requests wait to be sent to
# the scheduler, streams wait to be written, and /metrics waits.
GC_LINE = re.compile(
    r"LONG GARBAGE COLLECTION DETECTED \| Generation (?P<gen>\d+) \| Duration: (?P<s>[\d.]+)s"
)
GRAPH_FIELD = re.compile(r"(?:cuda|cpu|npu|musa) graph: (True|False)")
GRAPH_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
# With SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 (and --enable-metrics) SGLang times every forward on
# the GPU and counts it by phase (category: decode, target_verify, eagle_draft, …).
PHASE_TIME = "sglang:forward_execution_seconds_total"
PHASE_LABEL = re.compile(r'[{,]category="([^"]*)"')
# With --enable-metrics SGLang counts its forward passes by kind: a decode batch (one verify step
# of a speculative config) and a logged prefill batch, in a CUDA graph or not.
PASSES = "sglang:cuda_graph_passes_total"
PASS_MODE = re.compile(r'[{,]mode="([^"]*)"')
NO_GRAPH_FLAGS = ("--disable-cuda-graph", "--disable-decode-cuda-graph")
# Prefill graphs off: 0.5.17's flags, and the older builds' piecewise graphs (the DDTree fork).
NO_PREFILL_GRAPH_FLAGS = (
    "--disable-cuda-graph",
    "--disable-prefill-cuda-graph",
    "--disable-piecewise-cuda-graph",
)


# Runs in SGLang's interpreter: the prompts through the model's own tokenizer and its chat
# template, as SGLang's /v1/chat/completions renders them (serving_chat.py).
_RENDER = r"""
import json, sys
import transformers
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
conversations = json.loads(sys.stdin.read())
if not getattr(tok, "chat_template", None):
    print(json.dumps({"texts": None, "transformers": transformers.__version__}))
else:
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
             for c in conversations]
    print(json.dumps({"texts": texts, "transformers": transformers.__version__}))
"""


def _python(settings: EngineSettings) -> str:
    """[engines.sglang] python, else $SPECDEC_SGLANG_PYTHON, else this interpreter."""
    chosen = settings.python or os.environ.get("SPECDEC_SGLANG_PYTHON")
    return os.path.expanduser(chosen) if chosen else sys.executable


def _lint_python(settings: EngineSettings, python: str) -> str:
    """``python``, unless it is this interpreter by default and has no SGLang while a parser
    virtualenv (``$SPECDEC_CACHE/sglang-<version>-venv``, the newest) is there."""
    if settings.python or os.environ.get("SPECDEC_SGLANG_PYTHON"):
        return python
    if importlib.util.find_spec("sglang") is not None:
        return python
    venvs = [p for p in cache_root().glob("sglang-*-venv") if (p / "bin" / "python").exists()]
    if not venvs:
        return python
    newest = max(venvs, key=lambda p: _version_key(p.name.removeprefix("sglang-")[: -len("-venv")]))
    return str(newest / "bin" / "python")


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in text.split("."))


def _sglang_version(python: str) -> str | None:
    try:
        proc = _probe(python, "import importlib.metadata as m; print(m.version('sglang'))")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"sglang {proc.stdout.strip()}" if proc.returncode == 0 else None


def _probe(python: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def native_payload(req: RequestSpec) -> dict[str, Any]:
    """``/generate``: SGLang names the seed ``sampling_seed`` in its sampling parameters."""
    params: dict[str, Any] = {**req.sampling(), "max_new_tokens": req.max_tokens}
    if "seed" in params:
        params["sampling_seed"] = params.pop("seed")
    if req.ignore_eos:
        params["ignore_eos"] = True
    return {"text": req.text, "sampling_params": params, "stream": True}


def apply_meta_info(meta: Mapping[str, Any], rec: RunRecord) -> None:
    """Per-request speculative fields of SGLang's ``meta_info`` (absent without speculation)."""
    tokens = meta.get("completion_tokens")
    if not isinstance(tokens, int):
        raise RequestFailed("/generate meta_info carried no completion_tokens")
    rec.output_tokens = tokens
    rec.prompt_tokens = meta.get("prompt_tokens")
    verify = meta.get("spec_verify_ct")
    if isinstance(verify, int) and verify > 0:
        rec.verify_steps = verify
        rec.accept_length = tokens / verify
        rec.accept_source = "meta_info"
    rec.extra["meta_info"] = {k: meta[k] for k in META_FIELDS if k in meta}
    rates = meta_info_rates(meta)
    if rates:
        rec.extra["accept_rate_per_position"] = rates
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        rec.finish_reason = str(finish.get("type"))


class SGLangEngine(EngineBase):
    name = "sglang"
    readiness_path = "/health_generate"
    env_prefixes = (*EngineBase.env_prefixes, "SGLANG_", "SGL_", "FLASHINFER_")
    # its gRPC port, --port + 10000 unless SGLANG_GRPC_PORT says otherwise: some builds (e.g.
    # the DDTree fork) refuse to start when that is above 65535, even with gRPC off
    port_offsets = (10000,)

    def check_installed(self) -> None:
        settings = self.settings
        python = _python(settings)
        try:
            proc = _probe(
                python,
                "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineNotInstalled(
                f"cannot run {python} to look for SGLang: {exc}; set [engines.sglang] python = "
                '"/path/to/venv/bin/python" to an interpreter that has SGLang'
            ) from exc
        if proc.returncode != 0:
            raise EngineNotInstalled(
                f"SGLang is not installed for {python}: pip install 'sglang[all]' there, "
                'or point [engines.sglang] python = "/path/to/venv/bin/python" at one that has it'
            )

    def build_command(self, ctx: BootContext) -> LaunchSpec:
        argv = [_python(self.settings), "-m", "sglang.launch_server", "--model-path", ctx.model]
        argv += ["--host", ctx.host, "--port", str(ctx.port), "--enable-metrics"]
        if ctx.draft_model:
            argv += ["--speculative-draft-model-path", ctx.draft_model]
        argv += [*self.settings.extra_args, *ctx.config.args]
        if ctx.api_key and ctx.secret_dir is not None and "--config" not in argv:
            # SGLang merges a --config YAML into its arguments: the key stays off the argv.
            text = f"api-key: {json.dumps(ctx.api_key)}\n"  # a JSON string is a YAML scalar
            path = write_private(ctx.secret_dir, key_yaml_name(ctx.port), text)
            return finish_spec([*argv, "--config", str(path)], ctx, self.settings, key_in_file=True)
        return finish_spec(argv, ctx, self.settings)

    def version(self) -> str | None:
        return _sglang_version(_python(self.settings))

    def lint_version(self) -> str | None:
        """That of the interpreter whose parser :meth:`lint` asks (the parser virtualenv's
        where the boot interpreter has no SGLang), written with the interpreter when it is
        not the one that boots."""
        python = _python(self.settings)
        parser = _lint_python(self.settings, python)
        found = _sglang_version(parser)
        return found if parser == python or found is None else f"{found} in {parser}"

    def render(self, model: str, conversations: Sequence[Sequence[Mapping[str, str]]]) -> Rendering:
        """Through the native endpoint the prompts are sent as text: rendered here with the
        model's own tokenizer and chat template, in SGLang's interpreter (so with the
        transformers SGLang serves with), what the chat endpoint would send the model. A
        tokenizer without a chat template gets the plain ``User: … Assistant:`` text, said so."""
        if self.settings.api != "native":
            return super().render(model, conversations)
        python = _python(self.settings)
        try:
            found = run_script_cached(
                python, _RENDER, [model], json.dumps(conversations), timeout=RENDER_TIMEOUT_S,
                packages=("transformers", "tokenizers", "jinja2"), files=tokenizer_files(model),
            )  # fmt: skip
        except ScriptFailed as exc:
            raise EngineNotInstalled(
                f"cannot render the prompts with {model}'s chat template in {python}: {exc}; "
                'give it a tokenizer transformers can load, or set [engines.sglang] api = "chat"'
            ) from exc
        version = f"transformers {found['transformers']}"
        if found["texts"] is None:
            return Rendering(
                None, f"plain 'User: … Assistant:' text: {model}'s tokenizer has no chat "
                f"template ({version})", "plain",
            )  # fmt: skip
        return Rendering(
            [str(t) for t in found["texts"]], f"{model}'s chat template ({version})",
            "chat-template",
        )  # fmt: skip

    def lint(self, spec: LaunchSpec) -> list[Finding]:
        """The command line through the installed SGLang's own argument parser: that of the
        interpreter it boots with, or where none is set and this one has no SGLang, that of
        the parser virtualenv ./scripts/setup installs (SGLang's parser, no GPU needed)."""
        return lint_sglang(_lint_python(self.settings, spec.argv[0]), spec.argv[3:])

    def lint_load(self, spec: LaunchSpec, levels: Sequence[int]) -> list[Finding]:
        """Warnings for load levels that these flags measure badly, each fix in the installed
        SGLang's own flags (lint.load_prefill_advice)."""
        return lint_sglang_load(_lint_python(self.settings, spec.argv[0]), spec.argv[3:], levels)

    async def request(self, client: httpx.AsyncClient, req: RequestSpec, rec: RunRecord) -> None:
        if self.settings.api == "native":
            out = await stream_sse(
                client, "/generate", native_payload(req), lambda e: bool(e.get("text"))
            )
            if not out.events:
                raise RequestFailed("/generate stream carried no events")
            last = out.events[-1]
            rec.text = str(last.get("text", ""))
            apply_meta_info(last.get("meta_info") or {}, rec)
            rec.wall_s, rec.ttft_s = out.wall_s, out.ttft_s
        else:
            await stream_chat(client, req, rec)

    flushes = True

    async def flush(self, client: httpx.AsyncClient) -> None:
        """``POST /flush_cache``: the radix cache, the request pool and the KV pool's free list
        are reset, and so is NGRAM's n-gram store. SGLang answers 400 while a request still
        runs (the previous one's last steps), so a busy answer is retried for a few seconds."""
        answer = ""
        for _ in range(FLUSH_TRIES):
            try:
                resp = await client.post("/flush_cache")
            except httpx.HTTPError as exc:
                raise RequestFailed(f"/flush_cache: {exc}") from exc
            if resp.status_code == 200:
                return
            answer = f"HTTP {resp.status_code}: {resp.text[:200].strip()}"
            if resp.status_code != 400:
                break
            await asyncio.sleep(FLUSH_WAIT_S)
        raise RequestFailed(f"/flush_cache did not flush ({answer})")

    freezes_gc = True

    async def freeze_gc(self, client: httpx.AsyncClient) -> None:
        """``POST /freeze_gc``: the HTTP server's process freezes its collector (``gc.freeze``),
        and so do the scheduler and the detokenizer it forwards the request to; objects made
        later are still collected, but no full collection scans the framework's objects again.
        SGLang answers 200 once its own process froze."""
        try:
            resp = await client.post("/freeze_gc")
        except httpx.HTTPError as exc:
            raise RequestFailed(f"/freeze_gc: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise RequestFailed(
                f"/freeze_gc answered HTTP {resp.status_code}: {resp.text[:200].strip()!r} "
                "(SGLang 0.5 and later serve it)"
            )

    slot_flags = ("--max-running-requests",)
    running_gauge = "sglang:num_running_reqs"
    queued_gauge = "sglang:num_queue_reqs"

    def load_limits(self, argv: Sequence[str]) -> LoadLimits:
        """--max-running-requests, the decode CUDA graphs' largest batch (0: off), and the
        flag that turns prefill graphs off, if given."""
        slots, flag = flag_int(argv, self.slot_flags)
        prefill_off = next((f for f in NO_PREFILL_GRAPH_FLAGS if f in argv), None)
        off = next((f for f in NO_GRAPH_FLAGS if f in argv), None)
        if off is not None:
            return LoadLimits(slots, flag, 0, off, prefill_off)
        graph, graph_flag = flag_int(argv, GRAPH_FLAGS)
        return LoadLimits(slots, flag, graph, graph_flag, prefill_off)

    def log_facts(self, text: str) -> dict[str, Any]:
        """Its decode log lines: how many, how many ran outside CUDA graphs, the most requests
        running and queued, the median generation throughput it printed. Its prefill lines:
        how many batches, how many ran outside CUDA graphs, and the most new tokens of one
        that did. Its long garbage collections (with --gc-warning-threshold-secs): how many,
        the longest, and their time."""
        out: dict[str, Any] = {}
        lines = [m for m in DECODE_LINE.finditer(text)]
        if lines:
            queues = [int(m["queue"]) for m in lines if m["queue"] is not None]
            tputs = sorted(float(m["tput"]) for m in lines)
            out.update({
                "decode_lines": len(lines),
                "outside_graphs": sum(1 for m in lines if m["graph"] == "False"),
                "log_max_running": max(int(m["running"]) for m in lines),
                "log_max_queued": max(queues) if queues else None,
                "log_gen_tok_per_s": tputs[len(tputs) // 2],
            })  # fmt: skip
        prefills = [m for m in PREFILL_LINE.finditer(text)]
        if prefills:
            eager = [
                int(m["tokens"]) for m in prefills
                if (g := GRAPH_FIELD.search(m.group(0))) is not None and g.group(1) == "False"
            ]  # fmt: skip
            out.update({
                "prefill_batches": len(prefills),
                "prefill_outside_graphs": len(eager),
                "prefill_outside_max_tokens": max(eager) if eager else None,
            })  # fmt: skip
        pauses = [float(m["s"]) for m in GC_LINE.finditer(text)]
        if pauses:
            out.update(engine_gc_pauses=len(pauses), engine_gc_max_s=max(pauses),
                       engine_gc_s=sum(pauses))  # fmt: skip
        return out

    def phase_seconds(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float]:
        """GPU seconds per forward phase, from the device timer's counters (summed over their
        other labels); empty unless SGLANG_ENABLE_METRICS_DEVICE_TIMER=1."""
        return _deltas_by_label(before, after, PHASE_TIME, PHASE_LABEL)

    def forward_passes(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float]:
        """Forward passes between two /metrics reads by kind (``decode_cuda_graph``,
        ``decode_none``, ``prefill_cuda_graph``, ``prefill_none``), summed over their other
        labels: with the GPU seconds by phase, a round's GPU time per decode step, which the
        batch's occupancy does not move (a round with late arrivals runs more steps)."""
        return _deltas_by_label(before, after, PASSES, PASS_MODE)

    def accept_from_counters(
        self, before: Mapping[str, float], after: Mapping[str, float]
    ) -> dict[str, float | None]:
        verify = counter_delta(before, after, VERIFY_CALLS)
        tokens = counter_delta(before, after, GEN_TOKENS)
        length = tokens / verify if verify and tokens is not None else None
        return {
            "verify_steps": verify,
            "accepted_tokens": None,
            "draft_tokens": None,
            "accept_length": length,
        }

    async def server_info(self, client: httpx.AsyncClient) -> dict[str, Any] | None:
        """``/server_info`` (``/get_server_info`` on old builds): cumulative, for display only."""
        for path in ("/server_info", "/get_server_info"):
            try:
                resp = await get(client, path)
            except RequestFailed:
                return None
            if resp.status_code == 200:
                data = resp.json()
                states = data.get("internal_states") or []
                lengths = [finite_or_none(s.get("avg_spec_accept_length")) for s in states]
                return {"version": data.get("version"), "avg_spec_accept_length": lengths}
        return None


def _deltas_by_label(
    before: Mapping[str, float], after: Mapping[str, float], counter: str, label: re.Pattern[str]
) -> dict[str, float]:
    """How much ``counter`` grew between two /metrics reads, per value of one of its labels
    (summed over the others), in label order; values that did not grow are left out."""
    out: dict[str, float] = {}
    for key, value in after.items():
        match = label.search(key) if key.startswith(counter + "{") else None
        if match:
            out[match.group(1)] = out.get(match.group(1), 0.0) + value - before.get(key, 0.0)
    return {k: v for k, v in sorted(out.items()) if v > 0}
