"""`gen(tools=...)` in a program: free text until the model writes `<tool_call>`, then a call exact to one declared
tool's schema, then free text again (the chat API's "auto" mode), on SmolLM2-135M-Instruct (greedy, so
deterministic), and the bad input that is refused before any model call."""

from __future__ import annotations

import json

import jsonschema
import pytest

import sprig
from sprig import Engine
from sprig.lang.errors import InvalidArgumentError, UnsupportedError
from sprig.lang.tool_calls import TOOL_CALL_OPEN, call_schema, opened_call, parse_tools

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                              "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"zone": {"type": "string", "maxLength": 40}}, "required": ["zone"]}}}]
SYSTEM = ("You may call functions. Signatures:\n<tools>\n" + "\n".join(json.dumps(t) for t in TOOLS)
          + "\n</tools>\nFor each call, write <tool_call>\n{\"name\": <name>, \"arguments\": <json>}\n</tool_call>")
SHOTS = [("What is the weather in Rome?", '{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}'),
         ("What is the weather in Oslo?", '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}')]


@sprig.function
def agent(s, question, max_tokens):
    s += sprig.system(SYSTEM)
    for asked, call in SHOTS:  # two worked examples: the 135M model then opens calls of its own
        s += sprig.user(asked)
        s += sprig.assistant(f"<tool_call>\n{call}\n</tool_call>")
    s += sprig.user(question)
    s += sprig.assistant(sprig.gen("answer", max_tokens=max_tokens, tools=TOOLS, temperature=0))


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    with Engine(str(smollm2_gguf), num_threads=1, random_seed=0) as e:
        yield e


def test_opened_calls_are_exact_to_their_schema(engine):
    for city in ("Paris", "Tokyo"):
        state = agent.run(question=f"What is the weather in {city}?", max_tokens=80, backend=engine)
        calls = state.get_meta_info("answer")["tool_calls"]
        assert [c["name"] for c in calls] == ["get_weather"], state["answer"]
        args = json.loads(calls[0]["arguments"])
        jsonschema.validate(args, WEATHER)
        assert args["city"] == city
        assert state["answer"].startswith("<tool_call>\n{") and state["answer"].rstrip().endswith("</tool_call>")


def test_text_without_a_call_stays_free(engine):
    state = agent.run(question="Tell me a joke", max_tokens=80, backend=engine)
    assert state.get_meta_info("answer")["tool_calls"] == []
    assert "<tool_call>" not in state["answer"] and state["answer"]


def test_a_call_cut_by_max_tokens_is_not_reported(engine):
    state = agent.run(question="What is the weather in Paris?", max_tokens=6, backend=engine)
    meta = state.get_meta_info("answer")
    assert meta["tool_calls"] == [] and meta["completion_tokens"] <= 6
    assert meta["finish_reason"]["type"] == "length" and state["answer"].startswith("<tool_call>")


def test_call_schema_admits_exactly_the_declared_calls():
    schema = json.loads(call_schema(parse_tools(TOOLS)))
    jsonschema.validate({"name": "get_time", "arguments": {"zone": "UTC"}}, schema)
    for bad in ({"name": "get_time", "arguments": {"city": "x", "unit": "celsius"}},
                {"name": "get_weather", "arguments": {"city": "x"}}, {"name": "other", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_the_opener_is_read_from_the_matched_stop():
    assert opened_call({"finish_reason": {"type": "stop", "matched": TOOL_CALL_OPEN}})
    assert not opened_call({"finish_reason": {"type": "stop", "matched": 2}})  # EOS
    assert not opened_call({"finish_reason": {"type": "length", "matched": None}})
    with pytest.raises(UnsupportedError, match="reports which stop matched"):
        opened_call({"finish_reason": {"type": "stop", "matched": None}})  # cannot tell EOS from the opener


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tools": TOOLS, "regex": "a"}, "cannot be combined"),
    ({"tools": TOOLS, "dtype": int}, "cannot be combined"),
    ({"tools": []}, "non-empty list"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools\\[0\\] needs a name"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "declared twice"),
    ({"tools": [{"name": "f", "parameters": "{}"}]}, "must be a JSON schema object"),
])
def test_bad_tools_name_the_field(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message) as e:
        sprig.gen("x", **kwargs)
    assert e.value.param == "tools"
