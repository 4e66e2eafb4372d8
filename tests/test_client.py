"""The load driver and the engine adapters' requests against ``httpx.MockTransport`` servers:
SSE protocol edge cases, readiness probes, timing derivation and the runner end to end."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_specdec.core.configs import Registry, preset_configs
from pytest_specdec.core.results import (
    RunRecord,
    finalize_timings,
    load_results,
    meta_info_rates,
    position_rates_of,
    rates_from_histogram,
)
from pytest_specdec.core.suitefile import EngineSettings, SuiteSettings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings, run_errors
from pytest_specdec.engines import Engine, make_engine
from pytest_specdec.engines.base import RequestSpec
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.measure.client import ClientSettings, LoopThread, RequestFailed

Handler = Callable[[httpx.Request], httpx.Response]

REQ = RequestSpec(
    prompt_id="p1",
    messages=[{"role": "user", "content": "Say hello."}],
    text="User: Say hello.\nAssistant:",
    max_tokens=32,
)
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
TIMINGS = {
    "prompt_n": 11,
    "prompt_ms": 5.0,
    "predicted_n": 3,
    "predicted_ms": 30.0,
    "predicted_per_second": 100.0,
    "draft_n": 8,
    "draft_n_accepted": 6,
}


# --- helpers ----------------------------------------------------------------------------------


def sse(*events: object, done: bool = True) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> object:
    delta: dict[str, str] = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}


def final(usage: object = USAGE, timings: object = TIMINGS) -> object:
    event: dict[str, object] = {"id": "c1", "choices": [], "usage": usage}
    if timings is not None:
        event["timings"] = timings
    return event


CHAT_STREAM = [
    chunk(role=True),
    chunk("Hello"),
    chunk(", "),
    chunk("world", finish="stop"),
    final(),
]


def stream_response(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, headers={"content-type": "text/event-stream"}, content=body)


class SlowStream(httpx.AsyncByteStream):
    """A response body delivered piece by piece; an exception instance is raised when reached."""

    def __init__(self, parts: Sequence[bytes | float | Exception]) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            if isinstance(part, Exception):
                raise part
            if isinstance(part, float):
                await asyncio.sleep(part)
            else:
                yield part


def client_for(handler: Handler, settings: ClientSettings | None = None) -> httpx.AsyncClient:
    settings = settings or ClientSettings()
    return settings.build("http://test", transport=httpx.MockTransport(handler))


def do_request(
    engine: Engine,
    handler: Handler,
    req: RequestSpec = REQ,
    settings: ClientSettings | None = None,
) -> RunRecord:
    rec = RunRecord(config="c", prompt=req.prompt_id, run=0)

    async def go() -> None:
        async with client_for(handler, settings) as client:
            await engine.request(client, req, rec)

    asyncio.run(go())
    return rec


def probe(engine: Engine, handler: Handler) -> bool:
    async def go() -> bool:
        async with client_for(handler) as client:
            return await engine.is_ready(client)

    return asyncio.run(go())


def chat_handler(body: bytes, seen: list[httpx.Request] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        assert request.method == "POST"
        assert request.url.path == "/v1/chat/completions"
        return stream_response(body)

    return handler


def llama() -> Engine:
    return make_engine("llamacpp")


# --- OpenAI chat streaming --------------------------------------------------------------------


def test_chat_stream_fills_the_record() -> None:
    seen: list[httpx.Request] = []
    rec = do_request(llama(), chat_handler(sse(*CHAT_STREAM), seen))
    assert rec.error is None
    assert rec.text == "Hello, world"
    assert rec.output_tokens == 3
    assert rec.prompt_tokens == 11
    assert rec.finish_reason == "stop"
    assert rec.draft_tokens == 8
    assert rec.accepted_tokens == 6
    assert rec.extra["timings"] == TIMINGS
    assert rec.wall_s is not None and rec.wall_s > 0
    assert rec.ttft_s is not None and 0 < rec.ttft_s <= rec.wall_s
    payload = json.loads(seen[0].content)
    assert payload == {
        "messages": REQ.messages,
        "max_tokens": 32,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "authorization" not in seen[0].headers


def test_ttft_is_the_first_content_event_not_the_role_event() -> None:
    parts: list[bytes | float | Exception] = [
        sse(chunk(role=True), done=False),
        0.06,
        sse(chunk("Hi"), done=False),
        0.06,
        sse(chunk("!", finish="length"), final(timings=None)),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=SlowStream(parts))

    rec = do_request(llama(), handler)
    assert rec.ttft_s is not None and rec.wall_s is not None
    assert rec.ttft_s >= 0.05
    assert rec.wall_s - rec.ttft_s >= 0.05
    assert rec.text == "Hi!"
    assert rec.finish_reason == "length"


def test_stream_without_usage_fails_naming_usage() -> None:
    body = sse(chunk("Hello", finish="stop"))
    with pytest.raises(RequestFailed, match=r"usage\.completion_tokens"):
        do_request(llama(), chat_handler(body))


@pytest.mark.parametrize("usage", [{"prompt_tokens": 3}, {"completion_tokens": "3"}, None])
def test_usage_without_integer_completion_tokens_fails(usage: object) -> None:
    body = sse(chunk("Hello"), final(usage=usage))
    with pytest.raises(RequestFailed, match="usage"):
        do_request(llama(), chat_handler(body))


def test_http_500_names_status_and_body() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="boom: CUDA out of memory")

    with pytest.raises(RequestFailed) as info:
        do_request(llama(), handler)
    message = str(info.value)
    assert "HTTP 500" in message
    assert "/v1/chat/completions" in message
    assert "boom: CUDA out of memory" in message


def test_http_error_body_is_truncated() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text="x" * 5000)

    with pytest.raises(RequestFailed, match="HTTP 400") as info:
        do_request(llama(), handler)
    assert len(str(info.value)) < 400


def test_malformed_json_event_fails() -> None:
    body = sse(chunk("Hi"), '{"choices": [', final())
    with pytest.raises(RequestFailed, match="malformed JSON") as info:
        do_request(llama(), chat_handler(body))
    assert '{"choices": [' in str(info.value)


def test_non_object_event_fails() -> None:
    with pytest.raises(RequestFailed, match="unexpected stream event"):
        do_request(llama(), chat_handler(sse("[1, 2]")))


def test_stream_cut_before_done_fails() -> None:
    body = sse(*CHAT_STREAM, done=False)
    with pytest.raises(RequestFailed, match=r"ended before \[DONE\] \(5 events\)"):
        do_request(llama(), chat_handler(body))


def test_plain_json_answer_to_a_stream_request_fails() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        message = {"message": {"role": "assistant", "content": "Hi"}}
        return httpx.Response(200, json={"choices": [message], "usage": USAGE})

    with pytest.raises(RequestFailed, match=r"ended before \[DONE\] \(0 events\)"):
        do_request(llama(), handler)


def test_error_event_fails_with_its_message() -> None:
    body = sse(chunk("Hi"), {"error": {"message": "context length exceeded", "code": 400}})
    with pytest.raises(RequestFailed, match="server error in stream") as info:
        do_request(llama(), chat_handler(body))
    assert "context length exceeded" in str(info.value)


def test_events_after_done_are_ignored() -> None:
    body = sse(*CHAT_STREAM) + sse("not json at all", done=False)
    rec = do_request(llama(), chat_handler(body))
    assert rec.text == "Hello, world"
    assert rec.output_tokens == 3


def test_comments_blank_lines_and_compact_data_lines_are_understood() -> None:
    body = (
        b": keep-alive\n\n"
        b"event: message\n"
        + b"data:"
        + json.dumps(chunk("A")).encode()
        + b"\r\n\r\n"
        + b": ping\n\n"
        + sse(chunk("B", finish="stop"), final())
    )
    rec = do_request(llama(), chat_handler(body))
    assert rec.text == "AB"
    assert rec.output_tokens == 3


def test_read_timeout_fails_with_the_configured_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    settings = ClientSettings(read_timeout_s=7.5)
    with pytest.raises(RequestFailed, match="read timeout") as info:
        do_request(llama(), handler, settings=settings)
    assert "7.5 s" in str(info.value)


def test_read_timeout_mid_stream_fails() -> None:
    parts: list[bytes | float | Exception] = [
        sse(chunk("Hi"), done=False),
        httpx.ReadTimeout("timed out"),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=SlowStream(parts))

    with pytest.raises(RequestFailed, match="read timeout"):
        do_request(llama(), handler)


def test_connection_closed_mid_stream_fails() -> None:
    parts: list[bytes | float | Exception] = [
        sse(chunk("Hi"), done=False),
        httpx.RemoteProtocolError("peer closed connection"),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=SlowStream(parts))

    with pytest.raises(RequestFailed, match="connection closed by the server mid-response"):
        do_request(llama(), handler)


def test_connect_error_fails() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(RequestFailed, match="cannot connect") as info:
        do_request(llama(), handler)
    assert "Connection refused" in str(info.value)


def test_api_key_is_sent_as_bearer_token() -> None:
    seen: list[httpx.Request] = []
    do_request(
        llama(), chat_handler(sse(*CHAT_STREAM), seen), settings=ClientSettings(api_key="k1")
    )
    assert seen[0].headers["authorization"] == "Bearer k1"


def test_llamacpp_timings_without_drafts_mean_zero_drafts() -> None:
    timings = {"prompt_n": 11, "predicted_n": 3}
    rec = do_request(llama(), chat_handler(sse(chunk("Hi"), final(timings=timings))))
    assert (rec.draft_tokens, rec.accepted_tokens) == (0, 0)


def test_llamacpp_without_timings_leaves_drafts_unknown() -> None:
    rec = do_request(llama(), chat_handler(sse(chunk("Hi"), final(timings=None))))
    assert rec.draft_tokens is None
    assert rec.accepted_tokens is None
    assert "timings" not in rec.extra


def test_openai_engine_reads_draft_counts_only_when_present() -> None:
    engine = make_engine("openai")
    rec = do_request(engine, chat_handler(sse(chunk("Hi"), final())))
    assert (rec.draft_tokens, rec.accepted_tokens) == (8, 6)
    rec = do_request(engine, chat_handler(sse(chunk("Hi"), final(timings={"predicted_n": 3}))))
    assert (rec.draft_tokens, rec.accepted_tokens) == (None, None)


def test_vllm_sends_the_served_model_name() -> None:
    seen: list[httpx.Request] = []
    req = RequestSpec("p1", REQ.messages, REQ.text, 16, model="served-name")
    rec = do_request(make_engine("vllm"), chat_handler(sse(*CHAT_STREAM), seen), req)
    assert json.loads(seen[0].content)["model"] == "served-name"
    assert rec.output_tokens == 3


def test_sglang_chat_api_is_the_default() -> None:
    seen: list[httpx.Request] = []
    rec = do_request(make_engine("sglang"), chat_handler(sse(*CHAT_STREAM), seen))
    assert seen[0].url.path == "/v1/chat/completions"
    assert rec.text == "Hello, world"
    assert rec.accept_length is None


def test_request_through_a_loop_thread() -> None:
    loop = LoopThread()
    client = client_for(chat_handler(sse(*CHAT_STREAM)))
    rec = RunRecord(config="c", prompt="p1", run=0)
    try:
        loop.run(llama().request(client, REQ, rec), timeout=5)
    finally:
        loop.run(client.aclose(), timeout=5)
        loop.close()
    assert rec.output_tokens == 3
    assert rec.text == "Hello, world"


# --- SGLang native /generate ------------------------------------------------------------------

META = {
    "completion_tokens": 12,
    "prompt_tokens": 7,
    "e2e_latency": 0.2,
    "spec_verify_ct": 4,
    "spec_accept_length": 3.0,
    "spec_accept_rate": 0.5,
    "finish_reason": {"type": "length", "length": 12},
}


def native() -> SGLangEngine:
    return SGLangEngine(EngineSettings(api="native"))


def generate_handler(body: bytes, seen: list[httpx.Request] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        assert request.url.path == "/generate"
        return stream_response(body)

    return handler


def test_sglang_native_generate_reads_meta_info() -> None:
    seen: list[httpx.Request] = []
    partial = {"text": "Hel", "meta_info": {"completion_tokens": 1, "prompt_tokens": 7}}
    body = sse({"text": "", "meta_info": {}}, partial, {"text": "Hello world", "meta_info": META})
    rec = do_request(native(), generate_handler(body, seen))
    assert json.loads(seen[0].content) == {
        "text": REQ.text,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 32},
        "stream": True,
    }
    assert rec.text == "Hello world"
    assert rec.output_tokens == 12
    assert rec.prompt_tokens == 7
    assert rec.verify_steps == 4
    assert rec.accept_length == 3.0
    assert rec.accept_source == "meta_info"
    assert rec.finish_reason == "length"
    assert rec.extra["meta_info"] == {
        "spec_verify_ct": 4,
        "spec_accept_length": 3.0,
        "spec_accept_rate": 0.5,
    }
    assert rec.ttft_s is not None and rec.wall_s is not None
    assert 0 < rec.ttft_s <= rec.wall_s


def test_sglang_native_accept_length_is_tokens_per_verify_step() -> None:
    meta = {"completion_tokens": 10, "spec_verify_ct": 4}
    rec = do_request(native(), generate_handler(sse({"text": "x", "meta_info": meta})))
    assert rec.accept_length == 2.5


def test_sglang_histogram_of_correct_drafts_gives_acceptance_per_position() -> None:
    """SGLang's meta_info counts the verify steps by how many drafted tokens they accepted;
    position k is accepted in the steps with at least k (as measured on an H200: a chain of 15
    drafts, 19 verify steps)."""
    hist = [4, 1, 3, 1, 1, 1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 5]
    meta = {"completion_tokens": 128, "spec_verify_ct": 19, "spec_num_proposed_drafts": 285,
            "spec_correct_drafts_histogram": hist}  # fmt: skip
    rec = do_request(native(), generate_handler(sse({"text": "x", "meta_info": meta})))
    rates = rec.extra["accept_rate_per_position"]
    assert len(rates) == 15 and rates[0] == 15 / 19 and rates[-1] == 5 / 19
    assert rates == sorted(rates, reverse=True)
    assert position_rates_of({"extra": {"meta_info": meta}}) == rates  # results from before
    # a tree's histogram ends at its longest accepted path: the positions after it are zero
    tree = {"spec_verify_ct": 24, "spec_num_proposed_drafts": 360,
            "spec_correct_drafts_histogram": [0, 0, 4, 5, 3, 5, 5, 1, 1]}  # fmt: skip
    want = [24 / 24, 24 / 24, 20 / 24, 15 / 24, 12 / 24, 7 / 24, 2 / 24, 1 / 24]
    assert meta_info_rates(tree) == want + [0.0] * 7
    for bad in ([], [3], [1, -1], [0, 0], "x", [1, None]):
        assert rates_from_histogram(bad) is None, bad


def test_sglang_native_without_speculation_has_no_accept_length() -> None:
    meta = {"completion_tokens": 5, "prompt_tokens": 7}
    rec = do_request(native(), generate_handler(sse({"text": "hello", "meta_info": meta})))
    assert rec.output_tokens == 5
    assert rec.accept_length is None
    assert rec.accept_source is None
    assert rec.verify_steps is None


def test_sglang_native_without_completion_tokens_fails() -> None:
    body = sse({"text": "hello", "meta_info": {"prompt_tokens": 7}})
    with pytest.raises(RequestFailed, match="completion_tokens"):
        do_request(native(), generate_handler(body))


def test_sglang_native_empty_stream_fails() -> None:
    with pytest.raises(RequestFailed, match="carried no events"):
        do_request(native(), generate_handler(sse()))


def test_sglang_native_cut_stream_fails() -> None:
    body = sse({"text": "hel", "meta_info": {"completion_tokens": 1}}, done=False)
    with pytest.raises(RequestFailed, match=r"/generate ended before \[DONE\]"):
        do_request(native(), generate_handler(body))


# --- readiness --------------------------------------------------------------------------------


def answer(status: int, body: Any = None, path: str | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if path is not None and request.url.path != path:
            return httpx.Response(404, text="not found")
        if isinstance(body, (bytes, str)):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    return handler


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def hangs(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def test_llamacpp_ready_when_health_says_ok() -> None:
    assert probe(llama(), answer(200, {"status": "ok"}, path="/health")) is True


@pytest.mark.parametrize(
    "handler",
    [
        answer(503, {"error": {"code": 503, "message": "Loading model"}}),
        answer(200, {"status": "loading model"}),
        answer(200, "<html>not json</html>"),
        answer(200, []),
        answer(200, "ok"),
        refused,
        hangs,
    ],
    ids=["503", "loading", "not-json", "json-list", "text-ok", "refused", "timeout"],
)
def test_llamacpp_not_ready(handler: Handler) -> None:
    assert probe(llama(), handler) is False


def test_sglang_ready_uses_health_generate() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, text="")

    assert probe(make_engine("sglang"), handler) is True
    assert seen == ["/health_generate"]


@pytest.mark.parametrize("handler", [answer(503, "starting"), refused, hangs])
def test_sglang_not_ready(handler: Handler) -> None:
    assert probe(make_engine("sglang"), handler) is False


def test_sglang_models_endpoint_alone_is_not_readiness() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(503, text="warming up")

    assert probe(make_engine("sglang"), handler) is False


@pytest.mark.parametrize(("engine", "path"), [("vllm", "/health"), ("openai", "/v1/models")])
def test_other_engines_readiness_paths(engine: str, path: str) -> None:
    assert probe(make_engine(engine), answer(200, {}, path=path)) is True
    assert probe(make_engine(engine), answer(503, {}, path=path)) is False
    assert probe(make_engine(engine), refused) is False


# --- metrics and server info ------------------------------------------------------------------


def counters(engine: Engine, handler: Handler) -> dict[str, float] | None:
    async def go() -> dict[str, float] | None:
        async with client_for(handler) as client:
            return await engine.spec_counters(client)

    return asyncio.run(go())


def test_spec_counters_parse_the_metrics_page() -> None:
    page = "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
    page += "llamacpp:spec_decode_num_drafts_total 42\n"
    found = counters(llama(), answer(200, page, path="/metrics"))
    assert found == {"llamacpp:spec_decode_num_drafts_total": 42.0}


@pytest.mark.parametrize("handler", [answer(404, "no metrics"), refused])
def test_spec_counters_absent_is_none(handler: Handler) -> None:
    assert counters(llama(), handler) is None


def server_info(handler: Handler) -> dict[str, Any] | None:
    async def go() -> dict[str, Any] | None:
        async with client_for(handler) as client:
            return await SGLangEngine().server_info(client)

    return asyncio.run(go())


def test_sglang_server_info() -> None:
    info = {
        "version": "0.5.23",
        "internal_states": [{"avg_spec_accept_length": 2.75}, {}],
    }
    found = server_info(answer(200, info, path="/server_info"))
    assert found == {"version": "0.5.23", "avg_spec_accept_length": [2.75, None]}


def test_sglang_server_info_falls_back_to_the_old_path() -> None:
    info = {"version": "0.4.0", "internal_states": [{"avg_spec_accept_length": 3}]}
    found = server_info(answer(200, info, path="/get_server_info"))
    assert found == {"version": "0.4.0", "avg_spec_accept_length": [3.0]}


def test_sglang_server_info_absent() -> None:
    assert server_info(answer(404, "nope")) is None
    assert server_info(refused) is None


# --- derived timings --------------------------------------------------------------------------


def record(**fields: Any) -> RunRecord:
    return RunRecord(config="c", prompt="p", run=0, **fields)


def test_finalize_timings_throughput_and_tpot() -> None:
    rec = finalize_timings(record(output_tokens=11, wall_s=2.0, ttft_s=0.5))
    assert rec.error is None
    assert rec.tok_per_s == pytest.approx(5.5)
    assert rec.tpot_s == pytest.approx((2.0 - 0.5) / 10)


def test_finalize_timings_zero_tokens_is_an_error_not_a_number() -> None:
    rec = finalize_timings(record(output_tokens=0, wall_s=1.0, ttft_s=0.1))
    assert rec.error is not None and "0 output tokens" in rec.error
    assert rec.tok_per_s is None
    assert rec.tpot_s is None
    assert rec.ok is False


def test_finalize_timings_single_token_has_no_tpot() -> None:
    rec = finalize_timings(record(output_tokens=1, wall_s=0.25, ttft_s=0.2))
    assert rec.tok_per_s == pytest.approx(4.0)
    assert rec.tpot_s is None


def test_finalize_timings_without_ttft_has_no_tpot() -> None:
    rec = finalize_timings(record(output_tokens=5, wall_s=1.0))
    assert rec.tok_per_s == pytest.approx(5.0)
    assert rec.tpot_s is None


def test_finalize_timings_zero_wall_time_has_no_throughput() -> None:
    rec = finalize_timings(record(output_tokens=5, wall_s=0.0))
    assert rec.tok_per_s is None


def test_finalize_timings_leaves_failed_runs_without_numbers() -> None:
    rec = finalize_timings(record(error="HTTP 500", output_tokens=5, wall_s=1.0, ttft_s=0.1))
    assert rec.error == "HTTP 500"
    assert rec.tok_per_s is None
    assert rec.tpot_s is None


# --- the runner end to end --------------------------------------------------------------------

STEP_DRAFTS, STEP_ACCEPTED, STEP_DRAFTED = 4, 6, 16


class FakeLlamaServer:
    """``/health``, ``/metrics`` whose counters grow per chat request, and the chat stream."""

    def __init__(
        self, chat_status: int = 200, metrics: bool = True, stall_s: float | None = None
    ) -> None:
        self.chat_status = chat_status
        self.metrics = metrics
        self.stall_s = stall_s
        self.health_status = 200
        self.chats = 0
        self.paths: list[str] = []
        self.chat_bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []

    def page(self) -> str:
        n = self.chats
        return (
            "# HELP llamacpp:spec_decode_num_drafts_total verification steps\n"
            "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
            f"llamacpp:spec_decode_num_drafts_total {STEP_DRAFTS * n}\n"
            f"llamacpp:spec_decode_num_draft_tokens_total {STEP_DRAFTED * n}\n"
            f"llamacpp:spec_decode_num_accepted_tokens_total {STEP_ACCEPTED * n}\n"
            f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {3 * n}\n'
        )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        self.auth.append(request.headers.get("authorization"))
        if path == "/health":
            return httpx.Response(self.health_status, json={"status": "ok"})
        if path == "/metrics" and self.metrics:
            return httpx.Response(200, text=self.page())
        if path == "/v1/chat/completions":
            self.chat_bodies.append(json.loads(request.content))
            if self.chat_status != 200:
                return httpx.Response(self.chat_status, text="boom: CUDA out of memory")
            self.chats += 1
            if self.stall_s is not None:
                stalled: list[bytes | float | Exception] = [sse(chunk("Hi"), done=False)]
                return httpx.Response(200, stream=SlowStream([*stalled, self.stall_s]))
            timings = {**TIMINGS, "draft_n": STEP_DRAFTED, "draft_n_accepted": STEP_ACCEPTED}
            return stream_response(sse(*CHAT_STREAM[:-1], final(timings=timings)))
        return httpx.Response(404, text="not found")


@pytest.fixture
def make_runner(tmp_path: Path) -> Iterator[Callable[..., Runner]]:
    made: list[Runner] = []

    def make(fake: FakeLlamaServer, **options: Any) -> Runner:
        defaults: dict[str, Any] = {
            "server_url": "http://test",
            "engine": "llamacpp",
            "results_path": tmp_path / "r.json",
            "runs": 2,
            "warmup": False,
        }
        opts = RunSettings(**{**defaults, **options})
        runner = Runner(
            opts,
            Registry(preset_configs()),
            SuiteSettings(),
            load_workload("seed"),
            transport=httpx.MockTransport(fake),
        )
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


def test_runner_measures_through_the_server(
    make_runner: Callable[..., Runner], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replaced: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def spy_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        src_path, dst_path = Path(src), Path(dst)
        json.loads(src_path.read_text(encoding="utf-8"))  # complete before it is renamed
        replaced.append((src_path, dst_path))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy_replace)
    fake = FakeLlamaServer()
    runner = make_runner(fake)
    cfg = runner.configs[0]
    server = runner.boot(cfg)
    assert server.base_url == "http://test"
    assert server.record.server_url == "http://test"
    prompt = runner.workload.prompts[0]
    runs = runner.measure(server, prompt)
    runner.stop(server)

    assert [(r.run, r.phase, r.prompt, r.config) for r in runs] == [
        (0, "measure", prompt.id, "baseline"),
        (1, "measure", prompt.id, "baseline"),
    ]
    for rec in runs:
        assert rec.error is None
        assert rec.output_tokens == 3
        assert rec.text == "Hello, world"
        assert rec.accept_length == pytest.approx(1 + STEP_ACCEPTED / STEP_DRAFTS)
        assert rec.accept_source == "metrics-delta"
        assert rec.verify_steps == STEP_DRAFTS
        assert (rec.draft_tokens, rec.accepted_tokens) == (STEP_DRAFTED, STEP_ACCEPTED)
        assert rec.wall_s is not None and rec.ttft_s is not None
        assert rec.tok_per_s == pytest.approx(3 / rec.wall_s)
        assert rec.tpot_s == pytest.approx((rec.wall_s - rec.ttft_s) / 2)
    assert run_errors(runs) == []

    chat, metrics = "/v1/chat/completions", "/metrics"
    # /v1/models once: an external server's baselines are kept per the model it names
    assert fake.paths == ["/health", "/v1/models", metrics, chat, metrics, metrics, chat, metrics]
    assert fake.chats == 2
    expected_messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
    for body in fake.chat_bodies:
        assert body["messages"] == expected_messages
        assert body["max_tokens"] == (prompt.max_tokens or 256)
        assert body["stream"] is True

    results = tmp_path / "r.json"
    assert replaced and all(dst == results for _, dst in replaced)
    assert all(src.parent == results.parent and src != results for src, _ in replaced)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temp file left
    data = load_results(results)
    assert data["options"]["server_url"] == "http://test"
    [config] = data["configs"]
    assert config["name"] == "baseline"
    assert config["server_url"] == "http://test"
    assert [r["ok"] for r in config["runs"]] == [True, True]
    assert [r["accept_length"] for r in config["runs"]] == [2.5, 2.5]
    assert all(r["tok_per_s"] > 0 for r in config["runs"])
    assert data["workload"]["name"] == "seed"


def test_runner_records_a_failed_chat_as_an_error(
    make_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    fake = FakeLlamaServer(chat_status=500)
    runner = make_runner(fake)
    server = runner.boot(runner.configs[0])
    prompt = runner.workload.prompts[0]
    runs = runner.measure(server, prompt)
    runner.stop(server)

    assert len(runs) == 2
    for rec in runs:
        assert rec.error is not None
        assert "HTTP 500" in rec.error and "out of memory" in rec.error
        assert rec.tok_per_s is None
        assert rec.tpot_s is None
        assert rec.output_tokens is None
        assert rec.accept_length is None
    assert run_errors(runs) == [f"baseline/{prompt.id} run {i}: {runs[i].error}" for i in range(2)]
    # counters are read before a request, and not again after one that failed
    assert fake.paths.count("/metrics") == 2

    [config] = load_results(tmp_path / "r.json")["configs"]
    assert [r["ok"] for r in config["runs"]] == [False, False]
    assert [r["tok_per_s"] for r in config["runs"]] == [None, None]
    assert all("HTTP 500" in r["error"] for r in config["runs"])


def test_runner_without_metrics_reports_no_accept_length(
    make_runner: Callable[..., Runner],
) -> None:
    fake = FakeLlamaServer(metrics=False)
    runner = make_runner(fake, runs=1)
    server = runner.boot(runner.configs[0])
    [rec] = runner.measure(server, runner.workload.prompts[0])
    runner.stop(server)
    assert rec.error is None
    assert rec.accept_length is None
    assert rec.accept_source is None
    assert rec.verify_steps is None
    assert rec.draft_tokens == STEP_DRAFTED  # still known from the stream's timings
    assert rec.tok_per_s is not None and rec.tok_per_s > 0


def test_runner_sends_the_api_key_and_keeps_it_out_of_the_results(
    make_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    fake = FakeLlamaServer()
    runner = make_runner(fake, runs=1, api_key="sk-runner-secret")
    server = runner.boot(runner.configs[0])
    runner.measure(server, runner.workload.prompts[0])
    runner.stop(server)
    assert set(fake.auth) == {"Bearer sk-runner-secret"}
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert "sk-runner-secret" not in text
    assert json.loads(text)["options"]["api_key"] == "***"


def test_runner_gives_up_on_a_server_that_never_gets_ready(
    make_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    fake = FakeLlamaServer()
    fake.health_status = 503
    runner = make_runner(fake, startup_timeout_s=0.1)
    with pytest.raises(LaunchError, match=r"not ready after .* \(/health\)"):
        runner.boot(runner.configs[0])
    [config] = load_results(tmp_path / "r.json")["configs"]
    assert "not ready" in config["error"]
    assert fake.chats == 0


def test_runner_times_out_a_stalled_request(make_runner: Callable[..., Runner]) -> None:
    fake = FakeLlamaServer(stall_s=5.0)
    runner = make_runner(fake, runs=1, request_timeout_s=0.2)
    server = runner.boot(runner.configs[0])
    [rec] = runner.measure(server, runner.workload.prompts[0])
    runner.stop(server)
    assert rec.error is not None and "timed out" in rec.error
    assert rec.tok_per_s is None
    assert rec.accept_length is None


def test_runner_warms_up_every_prompt_once_before_measuring(
    make_runner: Callable[..., Runner],
) -> None:
    fake = FakeLlamaServer()
    runner = make_runner(fake, runs=1, warmup=True)
    server = runner.boot(runner.configs[0])
    prompts = runner.workload.prompts
    runner.measure(server, prompts[0])
    runner.measure(server, prompts[1])
    runner.stop(server)
    warmups = [r for r in server.record.runs if r.phase == "warmup"]
    assert [r.prompt for r in warmups] == [p.id for p in prompts]
    assert all(r.error is None and r.run == 0 for r in warmups)
    assert [r.prompt for r in server.record.measured()] == [prompts[0].id, prompts[1].id]
    assert server.record.warmup_s is not None and server.record.warmup_s > 0
    assert fake.chats == len(prompts) + 2


# --- a config's flush: SGLang's /flush_cache, busy while a request still runs --------------


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        ([200], None),
        ([400, 400, 200], None),  # busy twice: the last request's final steps
        ([500], "/flush_cache did not flush (HTTP 500: broken)"),
        ([400] * 60, "/flush_cache did not flush (HTTP 400: broken)"),
    ],
)
def test_sglang_flush_retries_while_busy_and_names_a_failure(
    answers: list[int], error: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_specdec.engines.sglang as sglang_module

    monkeypatch.setattr(sglang_module, "FLUSH_WAIT_S", 0.0)
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        code = answers[min(len(calls), len(answers)) - 1]
        return httpx.Response(code, text="ok" if code == 200 else "broken")

    async def go() -> None:
        async with client_for(handler) as client:
            await make_engine("sglang").flush(client)

    if error is None:
        asyncio.run(go())
        assert calls == ["POST /flush_cache"] * len(answers)
        return
    with pytest.raises(RequestFailed, match=re.escape(error)):
        asyncio.run(go())
    assert len(calls) == (1 if answers[0] == 500 else sglang_module.FLUSH_TRIES)
