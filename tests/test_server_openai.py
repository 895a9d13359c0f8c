"""`sprig serve` through the official `openai` client and raw HTTP: completions, chat, streaming, n, logprobs,
seeds, structured output, tools, and every bad input with its status and OpenAI error body."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from test_server_helpers import (
    ServerProcess,
    assert_no_kv_leak,
    assert_openai_error,
    tiny_model,
    wait_idle,
)

from sprig.runtime.model.tokenizer import Tokenizer

MAX_BODY = 400_000


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--max-request-bytes", str(MAX_BODY)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(tiny_model())


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def has_grammar(http):
    """Whether the server's engine applies grammar constraints (`engine.core.grammar`); tests that need it skip."""
    return bool(http.get("/server_info").json()["server"]["constrained_decoding"])


def needs_grammar(has: bool) -> None:
    assert has, "the server's engine must apply grammar constraints (/server_info constrained_decoding)"


GREEDY = {"temperature": 0, "max_tokens": 8, "extra_body": {"ignore_eos": True}}


def test_models_list_and_retrieve(client, model_id):
    assert model_id == tiny_model()
    assert client.models.retrieve(model_id).id == model_id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_completion_text_finish_and_exact_usage(client, model_id, tok):
    res = client.completions.create(model=model_id, prompt="The License", **GREEDY)
    choice = res.choices[0]
    assert choice.finish_reason == "length" and isinstance(choice.text, str)
    assert res.usage.completion_tokens == 8
    assert res.usage.prompt_tokens == len(tok.encode("The License"))
    assert res.usage.total_tokens == res.usage.prompt_tokens + 8


def test_completion_prompt_forms_and_n(client, model_id, tok):
    ids = tok.encode("Copyright")
    by_text = client.completions.create(model=model_id, prompt="Copyright", **GREEDY)
    by_ids = client.completions.create(model=model_id, prompt=ids, **GREEDY)
    assert by_ids.choices[0].text == by_text.choices[0].text
    two = client.completions.create(model=model_id, prompt=[ids, tok.encode("Work")], **GREEDY)
    assert [c.index for c in two.choices] == [0, 1] and two.choices[0].text == by_text.choices[0].text
    many = client.completions.create(model=model_id, prompt=["a b", "c d"], n=3, temperature=1.0, max_tokens=4,
                                     extra_body={"ignore_eos": True})
    assert [c.index for c in many.choices] == list(range(6))
    assert many.usage.completion_tokens == 24
    assert many.usage.prompt_tokens == len(tok.encode("a b")) + len(tok.encode("c d"))


def _stream_completion(client, model_id, **kw):
    chunks = list(client.completions.create(model=model_id, stream=True, **kw))
    return chunks, "".join(c.choices[0].text for c in chunks if c.choices)


def test_completion_stream_equals_non_stream_and_seeds_repeat(client, model_id):
    kw = {"prompt": "Licensed under", "temperature": 0.9, "max_tokens": 24, "seed": 1234,
          "extra_body": {"ignore_eos": True}}
    full = client.completions.create(model=model_id, **kw).choices[0].text
    again = client.completions.create(model=model_id, **kw).choices[0].text
    chunks, streamed = _stream_completion(client, model_id, **kw, stream_options={"include_usage": True})
    assert full == again == streamed
    assert all(c.choices for c in chunks[:-1]) and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 24
    assert [c.choices[0].finish_reason for c in chunks[:-1]].count("length") == 1
    other = client.completions.create(model=model_id, **{**kw, "seed": 99}).choices[0].text
    assert other != full


def test_completion_stream_without_include_usage_has_no_usage_chunk(client, model_id):
    chunks, _ = _stream_completion(client, model_id, prompt="x", max_tokens=4, temperature=0)
    assert chunks and all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_completion_logprobs_and_echo(client, model_id, tok):
    res = client.completions.create(model=model_id, prompt="The Work", logprobs=3, **GREEDY)
    lp = res.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert all(v <= 0 for v in lp.token_logprobs) and all(1 <= len(t) <= 3 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)
    echo = client.completions.create(model=model_id, prompt="The Work", logprobs=1, echo=True, **GREEDY)
    e = echo.choices[0]
    n_prompt = len(tok.encode("The Work"))
    assert e.text.startswith("The Work") and e.text == "The Work" + res.choices[0].text
    assert len(e.logprobs.tokens) == n_prompt + 8 and e.logprobs.token_logprobs[0] is None
    assert e.logprobs.token_logprobs[n_prompt:] == pytest.approx(lp.token_logprobs, abs=1e-4)


def test_completion_stop_string(client, model_id):
    base = client.completions.create(model=model_id, prompt="The Work", **GREEDY).choices[0].text
    word = base[2:5]
    cut = client.completions.create(model=model_id, prompt="The Work", stop=[word], **GREEDY).choices[0]
    assert cut.finish_reason == "stop" and word not in cut.text and base.startswith(cut.text)


CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


def test_chat_completion_usage_matches_the_template(client, model_id, tok):
    res = client.chat.completions.create(model=model_id, messages=CHAT, **GREEDY)
    prompt = tok.apply_chat_template(CHAT, add_generation_prompt=True)
    assert res.usage.prompt_tokens == len(tok.encode(prompt, add_special_tokens=False))
    assert res.usage.completion_tokens == 8 and res.choices[0].message.role == "assistant"
    assert res.choices[0].finish_reason == "length"


def test_chat_stream_equals_non_stream_with_seed_and_n(client, model_id):
    kw = {"messages": CHAT, "temperature": 1.0, "max_tokens": 16, "seed": 7, "n": 2,
          "extra_body": {"ignore_eos": True}}
    full = client.chat.completions.create(model=model_id, **kw)
    chunks = list(client.chat.completions.create(model=model_id, stream=True, stream_options={"include_usage": True},
                                                 **kw))
    texts = ["", ""]
    for c in chunks[:-1]:
        assert c.choices
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
    assert texts == [c.message.content for c in full.choices]
    assert texts[0] != texts[1]  # n copies are sampled with different seeds
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 32
    assert chunks[0].choices[0].delta.role == "assistant"


def test_chat_logprobs_top_logprobs(client, model_id):
    res = client.chat.completions.create(model=model_id, messages=CHAT, logprobs=True, top_logprobs=2, **GREEDY)
    content = res.choices[0].logprobs.content
    assert len(content) == 8
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    assert "".join(t.token for t in content) == res.choices[0].message.content


def test_chat_accepts_text_parts_developer_role_and_tool_history(client, model_id):
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "In Paris."}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"celsius\": 21}"},
    ]
    res = client.chat.completions.create(model=model_id, messages=messages, **GREEDY)
    assert res.choices[0].finish_reason == "length"


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": False}}}


def test_tools_auto_answers_content_or_calls(client, model_id):
    res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER, CLOCK], **GREEDY)
    msg = res.choices[0].message
    assert msg.tool_calls is None or all(c.function.name in ("get_weather", "get_time") for c in msg.tool_calls)


def test_tool_choice_named_arguments_validate(client, model_id, has_grammar):
    needs_grammar(has_grammar)
    import jsonschema

    res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER, CLOCK], temperature=0.7,
                                         max_tokens=128, seed=3,
                                         tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = res.choices[0].message.tool_calls
    assert res.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])


def test_tool_choice_required_arguments_validate(client, model_id, has_grammar):
    needs_grammar(has_grammar)
    import jsonschema

    res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER, CLOCK], temperature=0.7,
                                         max_tokens=200, seed=5, tool_choice="required")
    calls = res.choices[0].message.tool_calls
    assert calls
    schemas = {"get_weather": WEATHER["function"]["parameters"], "get_time": CLOCK["function"]["parameters"]}
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_response_format_json_schema_output_validates(client, model_id, has_grammar):
    needs_grammar(has_grammar)
    import jsonschema

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    for stream in (False, True):
        kw = {"model": model_id, "messages": CHAT, "response_format": fmt, "temperature": 0.8, "max_tokens": 96,
              "seed": 11}
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                           if c.choices)
        else:
            text = client.chat.completions.create(**kw).choices[0].message.content
        jsonschema.validate(json.loads(text), schema)


def test_openapi_document_lists_the_routes(http):
    doc = http.get("/openapi.json").json()
    assert {"/v1/completions", "/v1/chat/completions", "/generate", "/v1/models"} <= set(doc["paths"])
    assert "CompletionRequest" in doc["components"]["schemas"]


def test_per_request_timeout_aborts_and_frees(http, model_id, server):
    body = {"model": model_id, "prompt": "x", "max_tokens": 1500, "ignore_eos": True, "temperature": 0,
            "timeout": 0.3}
    assert_openai_error(http.post("/v1/completions", json=body), 408, "timeout", "request_timeout")
    with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["error"]["code"] == "request_timeout"
    assert_no_kv_leak(wait_idle(server.url))


# --- bad input: status and OpenAI body, never a 500 -------------------------------------------------------

C, CH = "/v1/completions", "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
BAD_JSON_BODIES = [
    (b"this is not json", "invalid_json"),
    (b'{"prompt": "x", "max_tokens": ', "invalid_json"),
    (b'[{"prompt": "x"}]', "invalid_json"),
    (b'"just a string"', "invalid_json"),
    (b"", "invalid_json"),
    (b'{"prompt": "x", "temperature": NaN}', "invalid_json"),
    (b'{"prompt": "x", "temperature": Infinity}', "invalid_json"),
    (b'{"prompt": "x", "max_tokens": 1' + b"0" * 400 + b"}", None),
    (b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", None),
]


@pytest.mark.parametrize("raw,code", BAD_JSON_BODIES, ids=[str(i) for i in range(len(BAD_JSON_BODIES))])
def test_malformed_bodies_are_400(http, raw, code):
    resp = http.post(C, content=raw, headers={"Content-Type": "application/json"})
    assert_openai_error(resp, 400, None, code)


BAD_REQUESTS = [
    (C, {"prompt": "x", "max_tokens": "10"}, "max_tokens", None),
    (C, {"prompt": "x", "temperature": -1}, "temperature", "out_of_range"),
    (C, {"prompt": "x", "top_p": 0}, "top_p", "out_of_range"),
    (C, {"prompt": "x", "top_p": 1.5}, "top_p", "out_of_range"),
    (C, {"prompt": "x", "top_k": 10**6}, "top_k", "out_of_range"),
    (C, {"prompt": "x", "min_p": 2}, "min_p", "out_of_range"),
    (C, {"prompt": "x", "presence_penalty": 3}, "presence_penalty", "out_of_range"),
    (C, {"prompt": "x", "repetition_penalty": 0}, "repetition_penalty", "out_of_range"),
    (C, {"prompt": "x", "stream": "yes"}, "stream", None),
    (C, {"prompt": "x", "n": 1000, "temperature": 1}, "n", "out_of_range"),
    (C, {"prompt": "x", "n": 2, "temperature": 0}, "n", None),
    (C, {"prompt": "x", "max_tokens": -1}, "max_tokens", "out_of_range"),
    (C, {"prompt": "x", "min_tokens": 9, "max_tokens": 4}, "min_tokens", "out_of_range"),
    (C, {"prompt": ""}, "prompt", "empty"),
    (C, {"prompt": []}, "prompt", "empty"),
    (C, {"prompt": [[]]}, "prompt", "empty"),
    (C, {"prompt": [999999]}, "prompt", "invalid_token_id"),
    (C, {"prompt": [-1]}, "prompt", "invalid_token_id"),
    (C, {"prompt": [5] * 2048}, "prompt", "context_length_exceeded"),
    (C, {"prompt": "x", "max_tokens": 2048}, "max_tokens", "context_length_exceeded"),
    (C, {"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias", None),
    (C, {"prompt": "x", "logit_bias": {"999999": 1}}, "logit_bias", "out_of_range"),
    (C, {"prompt": "x", "logit_bias": {"5": 1000}}, "logit_bias", "out_of_range"),
    (C, {"prompt": "x", "stop": ""}, "stop", "empty"),
    (C, {"prompt": "x", "stop": ["a"] * 1000}, "stop", "too_many"),
    (C, {"prompt": "x", "seed": -1}, "seed", "out_of_range"),
    (C, {"prompt": "x", "seed": 1.5}, "seed", None),
    (C, {"prompt": "x", "logprobs": 50}, "logprobs", "out_of_range"),
    (C, {"prompt": "x", "regex": "("}, "regex", "invalid_regex"),
    (C, {"prompt": "x", "json_schema": {"type": 5}}, "json_schema", "invalid_schema"),
    (C, {"prompt": "x", "suffix": "y"}, "suffix", "unsupported"),
    (C, {"prompt": "x", "best_of": 3}, "best_of", "unsupported"),
    (C, {"prompt": "x", "timeout": -1}, "timeout", "out_of_range"),
    (C, {"prompt": ["x"] * 300}, "prompt", "too_many"),
    (CH, {"messages": {}}, "messages", None),
    (CH, {"messages": []}, "messages", "empty"),
    (CH, {"messages": [{"role": "user", "content": []}]}, "messages.0.content", "empty"),
    (CH, {"messages": [{"role": "user"}]}, "messages.0.content", "empty"),
    (CH, {"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role", None),
    (CH, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/x"}}]}]},
     "messages.0.content.0.type", "unsupported_content"),
    (CH, {"messages": [{"role": "user", "content": "x" * 9000}]}, "messages", "context_length_exceeded"),
    (CH, {"messages": MSG, "max_tokens": 4096}, "max_tokens", "context_length_exceeded"),
    (CH, {"messages": MSG, "top_logprobs": 3}, "top_logprobs", "conflicting_parameters"),
    (CH, {"messages": MSG, "logprobs": True, "top_logprobs": 99}, "top_logprobs", "out_of_range"),
    (CH, {"messages": MSG, "response_format": {"type": "xml"}}, "response_format.type", None),
    (CH, {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                                                                                      "schema": {"type": "nope"}}}},
     "response_format.json_schema.schema", "invalid_schema"),
    (CH, {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema", "invalid_schema"),
    (CH, {"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]},
     "tools.0.function.parameters", "invalid_schema"),
    (CH, {"messages": MSG, "tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "tools.0.function.name", "invalid_tool"),
    (CH, {"messages": MSG, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "invalid_tool_choice"),
    (CH, {"messages": MSG, "tool_choice": "required"}, "tool_choice", "invalid_tool_choice"),
    (CH, {"messages": MSG, "temperature": True}, "temperature", None),
]


@pytest.mark.parametrize("path,body,param,code", BAD_REQUESTS, ids=[f"{p[4:]}:{pa}" for p, _, pa, _ in BAD_REQUESTS])
def test_bad_requests_are_400_naming_the_field(http, path, body, param, code):
    err = assert_openai_error(http.post(path, json=body), 400, param, code)
    assert err["type"] == "invalid_request_error"


GRAMMAR_ERRORS = [
    (CH, {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": "(?<=a)b"}}}},
     "response_format.json_schema.schema", "unsupported_keyword"),
    (CH, {"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/nope"}}}}}], "tool_choice": "required"},
     "tools.0.function.parameters", "invalid_schema"),
    (C, {"prompt": "x", "regex": "(a|b)*a(a|b){40}"}, "regex", "grammar_too_complex"),
    (C, {"prompt": "x", "json_schema": {"type": "array", "minItems": 1000000}}, "json_schema", "grammar_too_complex"),
]


@pytest.mark.parametrize("path,body,param,code", GRAMMAR_ERRORS, ids=[c for *_, c in GRAMMAR_ERRORS])
def test_constraints_the_grammar_refuses_are_400(http, has_grammar, path, body, param, code):
    needs_grammar(has_grammar)
    assert_openai_error(http.post(path, json=body), 400, param, code)


def test_context_errors_give_both_counts(http):
    err = assert_openai_error(http.post(C, json={"prompt": [5] * 2000, "max_tokens": 100}), 400, "max_tokens",
                              "context_length_exceeded")
    assert "2000" in err["message"] and "100" in err["message"] and "2048" in err["message"]


def test_unknown_model_is_404(http):
    err = assert_openai_error(http.post(C, json={"model": "gpt-17", "prompt": "x"}), 404, "model",
                              "model_not_found")
    assert err["type"] == "not_found_error"
    assert_openai_error(http.post(CH, json={"model": "gpt-17", "messages": MSG}), 404, "model")


def test_oversized_body_is_413_even_without_content_length(http):
    big = {"prompt": "x" * (MAX_BODY + 10)}
    assert_openai_error(http.post(C, json=big), 413, None, "request_too_large")

    def chunks():
        yield b'{"prompt": "'
        for _ in range(MAX_BODY // 1000 + 2):
            yield b"y" * 1000
        yield b'"}'

    resp = http.post(C, content=chunks(), headers={"Content-Type": "application/json"})
    assert_openai_error(resp, 413, None, "request_too_large")


def test_wrong_content_type_is_415_and_unknown_route_404(http):
    assert_openai_error(http.post(C, content=b"prompt=x", headers={"Content-Type": "application/x-www-form-urlencoded"}),
                        415, None, "unsupported_media_type")
    assert_openai_error(http.get("/v1/nothing"), 404)
    assert_openai_error(http.get(C), 405)


def test_unknown_fields_are_ignored(http):
    resp = http.post(C, json={"prompt": "x", "max_tokens": 2, "chat_template_kwargs": {"x": 1}, "foo": [1]})
    assert resp.status_code == 200


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_bad_token_budget_is_reported_under_the_name_the_client_sent(http, field):
    r = http.post("/v1/chat/completions", json={"messages": MSG, field: -1})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == field and field in error["message"] and "max_new_tokens" not in error["message"]
