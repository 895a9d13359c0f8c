"""The typed server-to-engine boundary: `Engine.prepare` validates a `GenerateRequest` once, naming the client's
fields, and `Engine.open_stream` answers deltas that add up to what the dict API returns."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sprig import Engine
from sprig.runtime.engine.generate_request import (
    FieldNames,
    GenerateRequest,
    LogprobOptions,
    SamplingParams,
    generate_request,
)
from sprig.runtime.errors import RequestError

OPENAI_CHAT = FieldNames("messages", "max_completion_tokens", "min_tokens", "top_logprobs",
                         "response_format.json_schema.schema")


@pytest.fixture(scope="module")
def engine(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=1024, random_seed=0) as e:
        yield e


def _request(**params) -> GenerateRequest:
    return GenerateRequest(((5, 6, 7),), (SamplingParams(**params),), names=OPENAI_CHAT)


def test_the_request_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _request().rid = "x"  # type: ignore[misc]


@pytest.mark.parametrize("params,param", [
    ({"max_new_tokens": -1}, "max_completion_tokens"),
    ({"max_new_tokens": 4, "min_new_tokens": 9}, "min_tokens"),
    ({"max_new_tokens": 10**6}, "max_completion_tokens"),
    ({"temperature": -1.0}, "temperature"),
])
def test_errors_name_the_field_the_client_sent(engine, params, param):
    with pytest.raises(RequestError) as info:
        engine.prepare(_request(**params))
    assert info.value.param == param and param in info.value.message
    assert "max_new_tokens" not in info.value.message and "min_new_tokens" not in info.value.message


def test_logprob_options_and_prompt_are_named_as_sent(engine):
    too_many = dataclasses.replace(_request(), logprobs=LogprobOptions(True, -1, 21))
    with pytest.raises(RequestError) as info:
        engine.prepare(too_many)
    assert info.value.param == "top_logprobs"
    with pytest.raises(RequestError) as info:
        engine.prepare(dataclasses.replace(_request(), prompts=((engine.vocab_size,),)))
    assert info.value.param == "messages"


def test_a_bad_schema_names_the_clients_field(engine):
    async def submit() -> None:  # a schema fails to compile when the call is submitted, after prepare
        await engine.open_stream(engine.prepare(_request(json_schema="{not json")))

    with pytest.raises(RequestError) as info:
        asyncio.run(submit())
    assert info.value.param == "response_format.json_schema.schema"


def test_deltas_add_up_to_the_dict_apis_result(engine):
    params = {"max_new_tokens": 12, "temperature": 0.0}
    expected = engine.generate(input_ids=[5, 6, 7], sampling_params=params)

    async def stream() -> tuple[list[int], str, int]:
        call = await asyncio.to_thread(engine.prepare, GenerateRequest(((5, 6, 7),), (SamplingParams(**params),)))
        ids: list[int] = []
        text, deltas = "", 0
        async for batch in await engine.open_stream(call):
            for delta in batch:
                ids += delta.ids
                text += "".join(delta.text)
                deltas += 1
        return ids, text, deltas

    ids, text, deltas = asyncio.run(stream())
    assert ids == expected["output_ids"] and text == expected["text"] and deltas >= 1


def test_input_ids_take_any_integer_but_a_bool_and_reach_the_engine_as_ints():
    import numpy as np

    call = generate_request(input_ids=[np.int64(5), 6])  # the same integers SamplingParams takes
    assert call.prompts == ((5, 6),) and all(type(t) is int for t in call.prompts[0])
    with pytest.raises(RequestError, match="input_ids must be a list of integers"):
        generate_request(input_ids=[5, True])
