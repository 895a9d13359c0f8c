"""Tool calls and structural tags through the server on the demo model: forced calls, streamed deltas, bad input."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.test_server_helpers import ServerProcess

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
    "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
CHAT = [{"role": "user", "content": "Weather in Paris?"}]
ANSWER_TAG = {"type": "structural_tag", "triggers": ["<a>"], "structures": [
    {"begin": "<a>", "schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                                "additionalProperties": False}, "end": "</a>"}]}


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def test_a_required_call_streams_header_once_then_arguments_and_matches_the_response(client, model_id):
    kw = dict(model=model_id, messages=CHAT, tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=120,
              temperature=0.8, seed=11, parallel_tool_calls=False)
    whole = client.chat.completions.create(**kw)
    calls = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    jsonschema.validate(json.loads(calls[0].function.arguments), SCHEMAS[calls[0].function.name])
    chunks = list(client.chat.completions.create(**kw, stream=True))
    deltas = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert deltas[0].id and deltas[0].type == "function" and deltas[0].function.name == calls[0].function.name
    assert all(d.id is None and d.function.name is None for d in deltas[1:]) and len(deltas) > 1
    assert "".join(d.function.arguments or "" for d in deltas) == calls[0].function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    with client.chat.completions.stream(**kw) as stream:  # the openai client's helpers reassemble the call
        final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.arguments == calls[0].function.arguments


def test_a_named_call_is_written_in_the_family_format(client, model_id):
    res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER, CLOCK], max_tokens=120,
                                         temperature=0.8, seed=2, extra_body={"skip_special_tokens": False},
                                         tool_choice={"type": "function", "function": {"name": "get_time"}})
    call = res.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time" and json.loads(call.function.arguments)["zone"] in ("utc", "cet")


def test_a_call_cut_by_max_tokens_is_not_a_call(client, model_id):
    res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER], tool_choice="required",
                                         max_tokens=6, temperature=0)
    assert res.choices[0].finish_reason == "length" and not res.choices[0].message.tool_calls
    assert res.choices[0].message.content.startswith("<tool_call")


def test_auto_mode_text_stays_content(client, model_id):
    for seed in range(3):
        res = client.chat.completions.create(model=model_id, messages=CHAT, tools=[WEATHER], max_tokens=24,
                                             temperature=1.0, seed=seed)
        msg = res.choices[0].message
        for call in msg.tool_calls or []:  # a call the random model opens is valid by construction
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        assert msg.tool_calls or "<tool_call>" not in (msg.content or "")


def test_structural_tags_on_chat_completions_and_generate(server, client, model_id):
    chat = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=8, response_format=ANSWER_TAG)
    assert chat.choices[0].finish_reason in ("stop", "length")
    forced_chat = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=40, temperature=0,
                                                 response_format={**ANSWER_TAG, "mode": "forced", "parallel": False})
    assert forced_chat.choices[0].message.content.startswith("<a>")
    done = client.completions.create(model=model_id, prompt="hello", max_tokens=8,
                                     extra_body={"response_format": ANSWER_TAG})
    assert done.choices[0].finish_reason in ("stop", "length")
    forced = {**{k: v for k, v in ANSWER_TAG.items() if k != "type"}, "mode": "forced", "parallel": False}
    r = httpx.post(server.url + "/generate", timeout=120, json={"text": "hi", "sampling_params": {
        "structural_tag": forced, "max_new_tokens": 40, "temperature": 0}}).json()
    text = r["text"]
    assert text.startswith("<a>") and text.endswith("</a>")  # forced from the first token
    assert isinstance(json.loads(text[3:-4])["x"], int)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "structural_tag", "structures": [{"begin": "<b>", "schema": {}, "end": "x"}],
                          "triggers": ["<a>"]}}, "response_format.structures.0.begin"),
    ({"response_format": {"type": "structural_tag", "structures": [], "triggers": ["<a>"]}},
     "response_format.structures"),
    ({"tools": [WEATHER, {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "nope"}}}}}]}, "tools.1.function.parameters"),
])
def test_bad_structures_and_tool_schemas_name_the_field(server, model_id, body, param):
    r = httpx.post(server.url + "/v1/chat/completions", timeout=60,
                   json={"model": model_id, "messages": CHAT, "max_tokens": 4, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    if "tools" in body:
        assert "'f'" in r.json()["error"]["message"] and "/properties/a/type" in r.json()["error"]["message"]


def test_the_tool_agent_example_runs_a_round_trip(client):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "tool_agent.py"
    spec = importlib.util.spec_from_file_location("sprig_example_tool_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.run_agent(client, "What is 19 plus 23?", max_tokens=120)
    call = out["trace"][0]
    assert call["call"] in ("add", "get_weather") and "result" in call  # the random model's call ran as is
    assert "answer" in out["trace"][-1]


def test_tool_call_parser_mistral_forces_its_own_format():
    with ServerProcess("--tool-call-parser", "mistral") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        res = client.chat.completions.create(model=model, messages=CHAT, tools=[WEATHER, CLOCK], max_tokens=160,
                                             tool_choice="required", temperature=0.8, seed=4)
        calls = res.choices[0].message.tool_calls
        assert res.choices[0].finish_reason == "tool_calls" and calls
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
