"""Talk to `sprig serve` with the official `openai` client: completion, streamed chat, JSON output, a tool call.

    sprig serve &                       # SmolLM2-135M-Instruct on http://127.0.0.1:30000
    python examples/openai_client.py    # or: python examples/openai_client.py --base-url http://HOST:PORT/v1

The JSON and the tool arguments are valid by construction (grammar-constrained decoding), whatever the model.
"""

from __future__ import annotations

import argparse
import json
import os

import openai

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0,
                                                                      "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}


def run(client: openai.OpenAI) -> dict[str, object]:
    """Run the four calls; returns what each produced."""
    model = client.models.list().data[0].id
    completion = client.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0)
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                            max_tokens=16, stream=True, stream_options={"include_usage": True})
    streamed, usage = "", None
    for chunk in stream:
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    person = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Invent a person."}], max_tokens=64, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    call = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=64, seed=2,
        tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    tool_call = call.choices[0].message.tool_calls[0]
    return {
        "completion": completion.choices[0].text,
        "chat_stream": streamed,
        "chat_usage": usage.model_dump() if usage else None,
        "person": json.loads(person.choices[0].message.content),
        "tool_call": {"name": tool_call.function.name, "arguments": json.loads(tool_call.function.arguments)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("SPRIG_BASE_URL", "http://127.0.0.1:30000/v1"))
    parser.add_argument("--api-key", default=os.environ.get("SPRIG_API_KEY", "none"))
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    for name, value in run(client).items():
        print(f"{name}: {json.dumps(value, ensure_ascii=False)}")


if __name__ == "__main__":
    main()
