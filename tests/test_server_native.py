"""The SGLang-native protocol (/generate and friends, as SGLang's RuntimeEndpoint and bench tools use them) and the
operational routes (/health, /metrics, /server_info, /flush_cache)."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_server_helpers import ServerProcess, assert_no_kv_leak, assert_openai_error, tiny_model, wait_idle

from sprig.runtime.model.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(tiny_model())


GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}


def test_runtime_endpoint_start_reads_model_info(http):
    info = http.get("/get_model_info").json()
    assert info["model_path"] == tiny_model() and info["is_generation"] is True


def test_generate_one_and_batch_shapes(http, tok):
    one = http.post("/generate", json={"text": "The Work", "sampling_params": GREEDY}).json()
    assert set(one) == {"text", "output_ids", "meta_info"}
    meta = one["meta_info"]
    assert meta["prompt_tokens"] == len(tok.encode("The Work")) and meta["completion_tokens"] == 6
    assert meta["finish_reason"] == {"type": "length", "matched": None}
    batch = http.post("/generate", json={"text": ["The Work", "b"], "sampling_params": GREEDY}).json()
    assert isinstance(batch, list) and len(batch) == 2 and batch[0]["text"] == one["text"]
    by_ids = http.post("/generate", json={"input_ids": tok.encode("The Work"), "sampling_params": GREEDY}).json()
    assert by_ids["output_ids"] == one["output_ids"]
    ids_batch = http.post("/generate", json={"input_ids": [tok.encode("a"), tok.encode("b")],
                                             "sampling_params": [GREEDY, {**GREEDY, "max_new_tokens": 2}]}).json()
    assert [r["meta_info"]["completion_tokens"] for r in ids_batch] == [6, 2]


def test_frontend_sampling_params_with_nulls_are_accepted(http):
    params = {"max_new_tokens": 4, "min_new_tokens": 0, "n": 1, "stop": [], "stop_token_ids": None,
              "stop_regex": None, "temperature": 0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
              "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": False, "regex": None,
              "json_schema": None, "skip_special_tokens": True, "spaces_between_special_tokens": True}
    resp = http.post("/generate", json={"text": "x", "sampling_params": params, "lora_path": None})
    assert resp.status_code == 200, resp.text


def test_select_style_logprob_triples_with_text(http, tok):
    prompt = "Licensed under the"
    cached = http.post("/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 0}}).json()
    n = cached["meta_info"]["prompt_tokens"]
    body = {"text": [prompt + c for c in (" Apache", " MIT")], "return_logprob": True,
            "return_text_in_logprobs": True, "logprob_start_len": n - 2,
            "sampling_params": {"max_new_tokens": 0, "temperature": 0}}
    res = http.post("/generate", json=body).json()
    for r, choice in zip(res, (" Apache", " MIT"), strict=True):
        lps = r["meta_info"]["input_token_logprobs"]
        ids = tok.encode(prompt + choice)
        assert [t[1] for t in lps] == ids[n - 2:]
        assert all(isinstance(t[0], float) and t[2] == tok.decode([t[1]], skip_special_tokens=False) for t in lps)


def test_max_new_tokens_zero_is_prompt_only(http):
    res = http.post("/generate", json={"text": "abc", "sampling_params": {"max_new_tokens": 0}}).json()
    assert res["output_ids"] == [] and res["meta_info"]["completion_tokens"] == 0


def test_top_logprobs_are_triples_and_text_is_null_unless_asked(http):
    body = {"text": "The", "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": 3}
    meta = http.post("/generate", json=body).json()["meta_info"]
    assert len(meta["output_token_logprobs"]) == 6 and all(t[2] is None for t in meta["output_token_logprobs"])
    assert all(len(top) == 3 and len(top[0]) == 3 for top in meta["output_top_logprobs"])


def _sse(resp: httpx.Response) -> list:
    events = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


def test_stream_is_cumulative_and_ends_with_done(http):
    full = http.post("/generate", json={"text": "The Work", "sampling_params": GREEDY}).json()
    with http.stream("POST", "/generate", json={"text": "The Work", "sampling_params": GREEDY,
                                                "stream": True}) as resp:
        events = _sse(resp)
    assert events[-1] == "[DONE]"
    texts = [e["text"] for e in events[:-1]]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert texts[-1] == full["text"] and events[-2]["meta_info"]["finish_reason"]["type"] == "length"


def test_batch_stream_carries_index(http):
    with http.stream("POST", "/generate", json={"text": ["a", "b"], "sampling_params": GREEDY,
                                                "stream": True}) as resp:
        events = _sse(resp)[:-1]
    assert {e["index"] for e in events} == {0, 1}


@pytest.mark.parametrize("body,param", [
    ({"sampling_params": GREEDY}, "text"),
    ({"text": "x", "input_ids": [1]}, "text"),
    ({"text": ""}, "text"),
    ({"input_ids": [[]]}, "input_ids"),
    ({"input_ids": [10**7]}, "input_ids"),
    ({"text": "x", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"text": "x", "sampling_params": {"temperature": "hot"}}, "temperature"),
    ({"text": "x", "sampling_params": {"bogus": 1}}, "bogus"),
    ({"text": "x", "sampling_params": {"n": 10**6}}, "n"),
    ({"text": "x", "sampling_params": {"max_new_tokens": 5000}}, "max_new_tokens"),
    ({"text": "x", "top_logprobs_num": 100}, "top_logprobs_num"),
    ({"text": "x", "logprob_start_len": -5}, "logprob_start_len"),
    ({"text": "x", "return_logprob": "yes"}, "return_logprob"),
    ({"text": ["a", "b"], "sampling_params": [GREEDY]}, "sampling_params"),
])
def test_generate_bad_input_is_400(http, body, param):
    assert_openai_error(http.post("/generate", json=body), 400, param)


def test_health_metrics_and_server_info(http):
    assert http.get("/health").json() == {"status": "ok"}
    http.post("/generate", json={"text": "metrics please", "sampling_params": GREEDY})
    http.post("/generate", json={"text": ""})
    families = {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}
    for name in ("sprig_num_requests_running", "sprig_num_requests_waiting", "sprig_prompt_tokens",
                 "sprig_generation_tokens", "sprig_cached_tokens", "sprig_time_to_first_token_seconds",
                 "sprig_time_per_output_token_seconds", "sprig_e2e_request_latency_seconds",
                 "sprig_kv_cache_usage_ratio", "sprig_cache_hit_rate", "sprig_num_preemptions",
                 "sprig_grammar_compile_seconds", "sprig_request_errors", "sprig_tenant_requests",
                 "sprig_cache_hit_tokens", "sprig_hicache_bytes", "sprig_hicache_seconds", "sprig_preemptions_by_mode"):
        assert name in families, name
    errors = {s.labels["code"] for s in families["sprig_request_errors"].samples if s.name.endswith("_total")}
    assert "invalid_request" in errors
    generated = [s.value for s in families["sprig_generation_tokens"].samples if s.name.endswith("_total")]
    assert generated[0] >= 6
    info = http.get("/server_info").json()
    for key in ("running", "waiting", "kv_total_tokens", "kv_usage", "cache_hit_rate", "num_preemptions"):
        assert key in info
    assert http.get("/get_server_info").status_code == 200


def test_flush_cache_empties_the_prefix_cache(http, server):
    prompt = "x " * 40
    http.post("/generate", json={"text": prompt, "sampling_params": GREEDY})
    second = http.post("/generate", json={"text": prompt, "sampling_params": GREEDY}).json()
    assert second["meta_info"]["cached_tokens"] > 0
    wait_idle(server.url)
    resp = http.post("/flush_cache", json={"empty_cache": True})
    assert resp.status_code == 200 and resp.json()["success"] is True
    info = wait_idle(server.url)
    assert info["cache_evictable_tokens"] == 0
    assert_no_kv_leak(info)
    third = http.post("/generate", json={"text": prompt, "sampling_params": GREEDY}).json()
    assert third["meta_info"]["cached_tokens"] == 0
