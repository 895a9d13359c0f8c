"""SGLang's protocol as its clients use it, over HTTP: the extra sampling keys (`stop_regex`, `no_stop_trim`,
`stream_interval`, `sampling_seed`, `custom_params`), /model_info, GET /flush_cache and its `timeout` (and vLLM's
/reset_prefix_cache), and the incremental streaming mode (`--incremental-streaming-output`) with
`output_token_logprobs_length`."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from test_server_helpers import ServerProcess, tiny_model, wait_idle
from transformers import AutoTokenizer

from sprig.runtime.model.tokenizer import Tokenizer

PROMPT = "The Work"
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def full(http) -> dict:
    """The unconstrained greedy answer every stop test cuts."""
    return http.post("/generate", json={"text": PROMPT, "sampling_params": GREEDY}).json()


def chunks(client: httpx.Client, body: dict) -> list[dict]:
    """The parsed `data:` events of a /generate stream (without [DONE], which must end it)."""
    with client.stream("POST", "/generate", json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def a_substring(text: str) -> tuple[int, str]:
    """A 3-character piece from the middle of `text` whose first occurrence is where it is taken from."""
    for start in range(len(text) // 3, len(text) - 3):
        piece = text[start:start + 3]
        if text.find(piece) == start and piece.strip():
            return start, piece
    raise AssertionError(f"no usable piece in {text!r}")


def test_stop_regex_stops_at_the_first_match_and_reports_the_pattern(http, full):
    start, piece = a_substring(full["text"])
    pattern = re.escape(piece[0]) + "." + re.escape(piece[2])  # a real regex, not just the literal
    first = re.search(pattern, full["text"])
    assert first is not None and first.start() == start, "the greedy text changed: pick another piece"
    res = http.post("/generate", json={"text": PROMPT, "sampling_params": {**GREEDY, "stop_regex": pattern}}).json()
    assert res["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}
    assert res["text"] == full["text"][:start]
    assert res["output_ids"] == full["output_ids"][:len(res["output_ids"])]
    assert len(res["output_ids"]) < len(full["output_ids"])


def test_stop_regex_stream_never_shows_text_the_cut_removes(http, full):
    start, piece = a_substring(full["text"])
    pattern = re.escape(piece)
    events = chunks(http, {"text": PROMPT, "sampling_params": {**GREEDY, "stop_regex": [pattern]}})
    assert events[-1]["text"] == full["text"][:start]
    assert events[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}
    assert all(events[-1]["text"].startswith(e["text"]) for e in events)


def test_no_stop_trim_keeps_the_matched_stop_string(http, full):
    start, piece = a_substring(full["text"])
    res = http.post("/generate", json={"text": PROMPT, "sampling_params": {
        **GREEDY, "stop": piece, "no_stop_trim": True}}).json()
    assert res["meta_info"]["finish_reason"] == {"type": "stop", "matched": piece}
    assert res["text"].startswith(full["text"][:start] + piece) and full["text"].startswith(res["text"])
    trimmed = http.post("/generate", json={"text": PROMPT, "sampling_params": {**GREEDY, "stop": piece}}).json()
    assert trimmed["text"] == full["text"][:start] and trimmed["output_ids"] == res["output_ids"]


def test_sampling_seed_is_seed_and_custom_params_change_nothing(http):
    sampled = {"max_new_tokens": 8, "temperature": 1.0, "ignore_eos": True}
    by_seed = http.post("/generate", json={"text": PROMPT, "sampling_params": {**sampled, "seed": 5}}).json()
    by_alias = http.post("/generate", json={"text": PROMPT, "sampling_params": {
        **sampled, "sampling_seed": 5, "custom_params": {"anything": [1, 2]}}}).json()
    other = http.post("/generate", json={"text": PROMPT, "sampling_params": {**sampled, "sampling_seed": 6}}).json()
    assert by_alias["output_ids"] == by_seed["output_ids"] != other["output_ids"]


@pytest.mark.parametrize("key", ["structural_tag", "no_such_key"])
def test_unknown_keys_and_bad_structural_tags_are_a_clear_400(http, key):
    resp = http.post("/generate", json={"text": PROMPT, "sampling_params": {key: "x"}})  # "x": not a tag's JSON
    assert resp.status_code == 400 and resp.json()["error"]["param"] == key


def test_stream_interval_batches_chunks_without_losing_output(http, full):
    events = chunks(http, {"text": PROMPT, "sampling_params": {**GREEDY, "stream_interval": 5}})
    counts = [len(e["output_ids"]) for e in events]
    steps = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    assert all(step >= 5 for step in steps[:-1]), counts  # the first chunk and the last may be short
    assert len(events) <= 2 + 16 // 5
    assert events[-1]["text"] == full["text"] and events[-1]["output_ids"] == full["output_ids"]


def test_n_answers_a_flat_prompt_major_list_as_sglang_does(http):
    params = {"max_new_tokens": 4, "temperature": 1.0, "n": 2, "seed": 1}
    one = http.post("/generate", json={"text": PROMPT, "sampling_params": params}).json()
    assert isinstance(one, list) and len(one) == 2 and all({"text", "output_ids", "meta_info"} <= set(r) for r in one)
    batch = http.post("/generate", json={"text": ["a", PROMPT], "sampling_params": params}).json()
    prompt_tokens = [r["meta_info"]["prompt_tokens"] for r in batch]
    assert len(batch) == 4 and prompt_tokens[0] == prompt_tokens[1] != prompt_tokens[2] == prompt_tokens[3]
    events = chunks(http, {"text": PROMPT, "sampling_params": params})
    assert {e["index"] for e in events} == {0, 1}


def test_model_info_gives_a_tokenizer_a_client_can_load(http):
    info = http.get("/model_info").json()
    assert info == http.get("/get_model_info").json()
    assert info["model_path"] == tiny_model() and info["is_generation"] is True
    hf = AutoTokenizer.from_pretrained(info["tokenizer_path"])
    assert hf.encode(PROMPT, add_special_tokens=False) == Tokenizer(tiny_model()).encode(PROMPT)


def test_flush_cache_answers_get_and_post(http):
    for method in ("GET", "POST"):
        resp = http.request(method, "/flush_cache")
        assert resp.status_code == 200 and resp.json()["success"] is True, (method, resp.text)
    assert http.put("/flush_cache").status_code == 405


def test_flush_cache_waits_as_long_as_its_timeout_says(http, server):
    """`bench_serving --flush-cache` sends SGLang's `timeout`: a busy engine is waited for, not refused."""
    prompt = "flush " * 40
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 1500, "temperature": 0, "ignore_eos": True},
            "stream": True}
    started, result = threading.Event(), {}

    def generate() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c, c.stream("POST", "/generate", json=body) as resp:
            events = (line for line in resp.iter_lines() if line.startswith("data: {"))
            first = next(events)
            started.set()
            result["last"] = [first, *events][-1]

    thread = threading.Thread(target=generate)
    thread.start()
    assert started.wait(60)
    busy = http.post("/flush_cache")
    assert busy.status_code == 400 and busy.json()["error"]["code"] == "cache_busy"
    assert http.post("/flush_cache", params={"timeout": 120}).status_code == 200
    thread.join(120)
    assert json.loads(result["last"][6:])["meta_info"]["completion_tokens"] == 1500  # finished, not aborted
    again = http.post("/generate", json={"text": prompt, "sampling_params": GREEDY}).json()
    assert again["meta_info"]["cached_tokens"] == 0
    for bad in ("-1", "soon", "inf"):
        resp = http.post("/flush_cache", params={"timeout": bad})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "timeout", bad


def test_reset_prefix_cache_is_vllms_name_of_flush_cache(http, server):
    """`bench_serving --backend vllm --flush-cache` posts to /reset_prefix_cache."""
    prompt = "reset " * 40
    http.post("/generate", json={"text": prompt, "sampling_params": GREEDY})
    assert http.post("/generate", json={"text": prompt, "sampling_params": GREEDY}).json()["meta_info"][
        "cached_tokens"] > 0
    wait_idle(server.url)
    resp = http.post("/reset_prefix_cache")
    assert resp.status_code == 200 and resp.json()["success"] is True
    assert http.post("/generate", json={"text": prompt, "sampling_params": GREEDY}).json()["meta_info"][
        "cached_tokens"] == 0
    assert http.get("/reset_prefix_cache").status_code == 405


# --- incremental streaming ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def incremental():
    with ServerProcess("--incremental-streaming-output") as s, httpx.Client(base_url=s.url, timeout=60) as c:
        yield c


def test_incremental_chunks_carry_only_what_is_new(incremental, full):
    body = {"text": PROMPT, "sampling_params": GREEDY, "return_logprob": True}
    events = chunks(incremental, body)
    assert "".join(e["text"] for e in events) == full["text"]
    assert [i for e in events for i in e["output_ids"]] == full["output_ids"]
    logprobs = [lp for e in events for lp in e["meta_info"]["output_token_logprobs"]]
    assert [lp[1] for lp in logprobs] == full["output_ids"]
    lengths = [e["meta_info"]["output_token_logprobs_length"] for e in events]
    assert lengths == [sum(len(e["output_ids"]) for e in events[:k + 1]) for k in range(len(events))]
    assert len(events) > 1 and events[-1]["meta_info"]["completion_tokens"] == 16


def test_incremental_stream_of_n_keeps_each_sequence_apart(incremental):
    params = {"max_new_tokens": 6, "temperature": 1.0, "ignore_eos": True, "n": 2, "seed": 3}
    events = chunks(incremental, {"text": PROMPT, "sampling_params": params})
    whole = incremental.post("/generate", json={"text": PROMPT, "sampling_params": params}).json()
    for index in (0, 1):
        mine = [e for e in events if e["index"] == index]
        assert "".join(e["text"] for e in mine) == whole[index]["text"]
        assert [i for e in mine for i in e["output_ids"]] == whole[index]["output_ids"]


def test_cumulative_mode_reports_the_logprob_length_too(http):
    events = chunks(http, {"text": PROMPT, "sampling_params": GREEDY, "return_logprob": True})
    for e in events:
        assert e["meta_info"]["output_token_logprobs_length"] == len(e["meta_info"]["output_token_logprobs"])
        assert len(e["output_ids"]) == len(e["meta_info"]["output_token_logprobs"])
