"""Benchmark pieces without a model: workloads, arrivals, metrics, the SSE client (mock transport), the driver's
concurrency bound and conversation history, and the report."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
from pathlib import Path

import httpx
import pytest

from sprig.runtime.bench.client import Arrival, Driver, LoadSpec, OpenAIBackend, TurnCall, arrival_times
from sprig.runtime.bench.datasets import (
    PERSON_SCHEMA,
    Api,
    DatasetKind,
    Session,
    Turn,
    WorkloadSpec,
    build_workload,
    load_tokenizer,
    parse_dataset,
)
from sprig.runtime.bench.metrics import RequestRecord, Stat, summarize, validate_json


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-llama")


def test_random_prompts_have_exact_lengths_and_repeat_for_a_seed(tok):
    spec = WorkloadSpec(kind=DatasetKind.RANDOM, num_prompts=6, input_len=40, output_len=9, seed=3)
    a, b = build_workload(spec, tok), build_workload(spec, tok)
    assert [s.turns for s in a] == [s.turns for s in b]
    for s in a:
        (turn,) = s.turns
        assert turn.input_len == 40 == len(tok.encode(turn.text, add_special_tokens=False))
        assert turn.output_len == 9 and s.api is Api.COMPLETIONS and s.ignore_eos
    assert build_workload(WorkloadSpec(num_prompts=6, seed=4), tok)[0].turns != a[0].turns
    ranged = build_workload(WorkloadSpec(num_prompts=20, input_len=30, output_len=20, range_ratio=0.5), tok)
    assert all(10 <= s.turns[0].output_len <= 20 and 15 <= s.turns[0].input_len <= 30 for s in ranged)
    assert len({s.turns[0].output_len for s in ranged}) > 1


def test_shared_prefix_groups_share_a_prefix_and_arrive_interleaved(tok):
    spec = WorkloadSpec(kind=DatasetKind.SHARED_PREFIX, num_prompts=12, input_len=16, prefix_len=48, num_groups=3)
    sessions = build_workload(spec, tok)
    ids = [tok.encode(s.turns[0].text, add_special_tokens=False) for s in sessions]
    prefixes = {tuple(x[:40]) for x in ids}
    assert len(prefixes) == 3
    groups = [[tuple(x[:40]) for x in ids].index(tuple(x[:40])) for x in ids]
    assert groups != sorted(groups)  # shuffled, not group by group
    assert [s.sid for s in sessions] == list(range(12))


def test_multi_turn_and_json_schema_sessions(tok):
    conv = build_workload(WorkloadSpec(kind=DatasetKind.MULTI_TURN, num_prompts=2, num_turns=3, input_len=8), tok)
    assert all(len(s.turns) == 3 and s.api is Api.CHAT and s.system for s in conv)
    js = build_workload(WorkloadSpec(kind=DatasetKind.JSON_SCHEMA, num_prompts=2, input_len=8), tok)
    assert all(s.json_schema == PERSON_SCHEMA and not s.ignore_eos and s.api is Api.CHAT for s in js)


def test_jsonl_dataset_rows_and_errors(tok, tmp_path: Path):
    path = tmp_path / "w.jsonl"
    rows = [{"prompt": "hello there", "output_len": 5}, {"turns": ["hi", "and then?"], "system": "be brief"},
            {"prompt": "as JSON", "json_schema": {"type": "object"}}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    kind, file = parse_dataset(str(path))
    assert kind is DatasetKind.FILE
    sessions = build_workload(WorkloadSpec(kind=kind, path=file, num_prompts=10, output_len=7), tok)
    assert [len(s.turns) for s in sessions] == [1, 2, 1]
    assert sessions[0].turns[0].output_len == 5 and sessions[1].turns[0].output_len == 7
    assert sessions[1].api is Api.CHAT and sessions[1].system == "be brief"
    assert sessions[2].api is Api.CHAT and sessions[2].json_schema == {"type": "object"} and not sessions[2].ignore_eos
    assert len(build_workload(WorkloadSpec(kind=kind, path=file, num_prompts=1), tok)) == 1
    path.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match="w.jsonl:2"):
        build_workload(WorkloadSpec(kind=kind, path=file), tok)
    with pytest.raises(ValueError, match="unknown dataset"):
        parse_dataset("sharegpt")
    with pytest.raises(ValueError, match="num-prompts"):
        WorkloadSpec(num_prompts=0).validate()


def test_arrival_times_poisson_fixed_and_all_at_once():
    assert arrival_times(4, LoadSpec()) == [0.0] * 4
    assert arrival_times(3, LoadSpec(4.0, Arrival.FIXED)) == [0.0, 0.25, 0.5]
    times = arrival_times(4000, LoadSpec(8.0, Arrival.POISSON, seed=1))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert times == sorted(times) and abs(statistics.mean(gaps) - 1 / 8) < 0.01
    assert abs(statistics.stdev(gaps) - 1 / 8) < 0.015  # exponential: stdev equals the mean
    assert times == arrival_times(4000, LoadSpec(8.0, Arrival.POISSON, seed=1))


def test_summary_throughput_latencies_cache_and_validity():
    recs = [RequestRecord(0, 0, start=0.0, end=1.0, ttft=0.2, chunk_times=[0.2, 0.6, 1.0], prompt_tokens=10,
                          completion_tokens=5, cached_tokens=4, text='{"a": 1}', json_valid=True),
            RequestRecord(1, 0, start=1.0, end=2.0, ttft=0.4, chunk_times=[1.4, 2.0], prompt_tokens=10,
                          completion_tokens=3, cached_tokens=0, json_valid=False),
            RequestRecord(2, 0, start=0.5, end=0.6, error="HTTP 500", json_valid=False)]
    s = summarize(recs, "x", "random", math.inf, 4, load_avg="1 1 1")
    assert (s.completed, s.failed, s.duration_s) == (2, 1, 2.0)
    assert s.output_tok_s == 4.0 and s.input_tok_s == 10.0 and s.request_throughput == 1.0
    assert s.ttft_ms.mean == pytest.approx(300.0) and s.ttft_ms.p50 == pytest.approx(300.0)
    assert s.tpot_ms.mean == pytest.approx(1e3 * (0.8 / 4 + 0.6 / 2) / 2)
    assert s.itl_ms.mean == pytest.approx(1e3 * (0.4 + 0.4 + 0.6) / 3)
    assert s.cached_tokens == 4 and s.cache_hit_rate == pytest.approx(0.2)
    assert s.json_valid_share == pytest.approx(1 / 3) and s.first_error == "HTTP 500"
    assert math.isnan(Stat.of([]).p99)
    assert summarize(recs[:1], "x", "random", 1.0, None).cache_hit_rate == pytest.approx(0.4)


def test_validate_json_uses_the_schema():
    assert validate_json('{"name": "a", "age": 3, "city": "Lima", "member": true}', PERSON_SCHEMA)
    assert not validate_json('{"name": "a", "age": 300, "city": "Lima", "member": true}', PERSON_SCHEMA)
    assert not validate_json('{"name": "a"', PERSON_SCHEMA)


def _sse(*chunks: dict) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _call(api: Api, schema: dict | None = None) -> TurnCall:
    return TurnCall(api, "p", [{"role": "user", "content": "p"}], 8, True, schema, 3)


def test_openai_client_streams_completions_and_chat_with_usage_and_cache():
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/v1/completions":
            usage = {"prompt_tokens": 7, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 5}}
            return httpx.Response(200, content=_sse({"choices": [{"text": "ab"}]}, {"choices": [{"text": "c"}]},
                                                    {"choices": [], "usage": usage}))
        return httpx.Response(200, content=_sse({"choices": [{"delta": {"role": "assistant"}}]},
                                                {"choices": [{"delta": {"content": "{}"}}]},
                                                {"choices": [], "timings": {"cache_n": 2}}))

    async def go() -> tuple[RequestRecord, RequestRecord]:
        backend = OpenAIBackend("http://x/v1", model="m", extra_body={"top_k": 1},
                                transport=httpx.MockTransport(handler))
        a, b = RequestRecord(0, 0, 0.0), RequestRecord(1, 0, 0.0)
        await backend.send(_call(Api.COMPLETIONS), a, lambda: 1.0)
        await backend.send(_call(Api.CHAT, {"type": "object"}), b, lambda: 2.0)
        await backend.aclose()
        return a, b

    a, b = asyncio.run(go())
    assert (a.text, a.prompt_tokens, a.completion_tokens, a.cached_tokens, a.ttft) == ("abc", 7, 2, 5, 1.0)
    assert len(a.chunk_times) == 2 and a.ok
    assert (b.text, b.cached_tokens, len(b.chunk_times)) == ("{}", 2, 1)
    assert seen[0]["prompt"] == "p" and seen[0]["ignore_eos"] and seen[0]["top_k"] == 1 and seen[0]["stream"]
    assert seen[0]["stream_options"] == {"include_usage": True}
    assert seen[1]["path"] == "/v1/chat/completions" and seen[1]["messages"][0]["content"] == "p"
    assert seen[1]["response_format"]["json_schema"]["schema"] == {"type": "object"}


def test_openai_client_reports_http_and_stream_errors():
    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["model"] == "bad":
            return httpx.Response(400, json={"error": {"message": "nope"}})
        return httpx.Response(200, content=_sse({"choices": [{"text": "a"}]}, {"error": {"message": "boom"}}))

    async def go(model: str) -> RequestRecord:
        backend = OpenAIBackend("http://x", model=model, transport=httpx.MockTransport(handler))
        rec = RequestRecord(0, 0, 0.0)
        await backend.send(_call(Api.COMPLETIONS), rec, lambda: 0.5)
        await backend.aclose()
        return rec

    assert asyncio.run(go("bad")).error.startswith("HTTP 400")
    assert asyncio.run(go("good")).error == "boom"


class _FakeBackend:
    """Echoes the number of messages; records the peak number of requests in flight."""

    def __init__(self) -> None:
        self.inflight = self.peak = 0
        self.calls: list[TurnCall] = []

    async def send(self, call: TurnCall, record: RequestRecord, clock) -> None:
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        self.calls.append(call)
        await asyncio.sleep(0.01)
        record.ttft = clock() - record.start
        record.chunk_times.append(clock())
        record.text = f"answer{len(call.messages)}"
        record.completion_tokens = 1
        record.end = clock()
        self.inflight -= 1


def test_driver_bounds_concurrency_and_carries_conversation_history(tok):
    backend = _FakeBackend()
    sessions = [Session(i, (Turn("u1", 1, 2), Turn("u2", 1, 2)), api=Api.CHAT, system="sys") for i in range(6)]
    records = asyncio.run(Driver(backend, LoadSpec(max_concurrency=2), tok, progress=False).run(sessions))
    assert len(records) == 12 and backend.peak == 2 and all(r.ok for r in records)
    second = [c for c in backend.calls if len(c.messages) > 2]
    assert len(second) == 6
    assert [m["role"] for m in second[0].messages] == ["system", "user", "assistant", "user"]
    assert second[0].messages[2]["content"] == "answer2"
    assert "<|im_start|>assistant" in second[0].prompt and second[0].prompt_tokens_hint > 4
    assert all(r.prompt_tokens == c.prompt_tokens_hint for r, c in zip(records, backend.calls, strict=False))


def test_report_renders_plots_and_targets(tmp_path: Path):
    pytest.importorskip("matplotlib")
    from sprig.runtime.bench.report import render

    def run(system: str, wl: str, rnd: int, tok_s: float, hit: float | None) -> dict:
        stat = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p99": 3.0}
        summary = {"duration_s": 1.0, "output_tok_s": tok_s, "request_throughput": tok_s / 64, "ttft_ms": stat, "tpot_ms": stat,
                   "itl_ms": stat, "cache_hit_rate": hit, "json_valid_share": None}
        reqs = {"end": [0.5, 1.0], "ttft": [0.1, 0.2], "tpot": [0.01, 0.02], "prompt_tokens": [10, 10],
                "cached_tokens": [0, 8] if hit is not None else [None, None]}
        prof = {"model_ms_per_step": 9.0, "other_ms_per_step": 1.0, "tokens_per_step": 4.0, "avg_decode_batch": 4,
                "step_time_s": 0.5}
        return {"workload": wl, "round": rnd, "system": system, "summary": summary, "requests": reqs,
                "profile": prof if system == "sprig" else None}

    runs = [run(s, wl, r, v * (1 + r / 10), h) for r in range(3) for wl in ("random", "shared-prefix")
            for s, v, h in (("sprig", 300.0, 0.4), ("llama.cpp", 150.0, None), ("transformers", 50.0, None))]
    sweep = [{"workload": "random", "rate": r, "system": s, "summary": {"output_tok_s": 10 * r}}
             for r in (1, 2) for s in ("sprig", "llama.cpp")]
    data = {"started": "now", "machine": "test box", "load_before": "1", "load_after": "1", "skipped": {},
            "setup": {"model": "m", "dtype": "bf16", "threads": 2, "num_prompts": 64, "concurrency": 16,
                      "input_len": 128, "output_len": 64, "prefix_len": 512, "num_groups": 4, "rounds": 3},
            "runs": runs, "sweep": sweep}
    report = render(data, tmp_path).read_text()
    for png in ("throughput_vs_rate.png", "ttft_cdf.png", "tpot_cdf.png", "cache_hit_rate.png"):
        assert (tmp_path / png).stat().st_size > 5000 and f"]({png})" in report
    assert "| random | sprig / llama.cpp | output_tok_s | 2.00x | ≥ 1.5x | met |" in report
    assert "| random | sprig / transformers | output_tok_s | 6.00x | ≥ 5x | met |" in report
    assert "| shared-prefix | sprig / llama.cpp | output_tok_s | 2.00x | ≥ 3x | missed by 1.50x |" in report
    assert "| sprig | random | 9.0 | 1.0 | 4.0 | 4.0 | 50% |" in report
