"""A tool-using agent against `sprig serve`, through the official `openai` client: call → run the tool → answer.

    sprig serve &                      # SmolLM2-135M-Instruct on http://127.0.0.1:30000
    python examples/tool_agent.py      # or: python examples/tool_agent.py --base-url http://HOST:PORT/v1 "question"

Each turn the model may answer or call tools (tool_choice "auto"); a call's arguments are valid for its tool's
schema by construction (the server constrains a call from the moment the model opens it), so the agent runs the
Python function without defensive parsing, appends the result as a ``tool`` message and asks again.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

import openai

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers and return their sum",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False}, "strict": True}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                       "required": ["city"], "additionalProperties": False}}},
]
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: {"sum": a + b},
    "get_weather": lambda city: {"city": city, "celsius": 17, "sky": "cloudy"},
}


def run_agent(client: openai.OpenAI, question: str, max_turns: int = 3, max_tokens: int = 96) -> dict[str, Any]:
    """Ask, run every call the model makes, feed the results back; stop at an answer or after `max_turns`."""
    model = client.models.list().data[0].id
    messages: list[Any] = [{"role": "user", "content": question}]
    trace: list[dict[str, Any]] = []
    for turn in range(max_turns):
        choice = "required" if turn == 0 else "none"  # why: a 135M model loops on calls; the demo shows one round
        done = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                                              tool_choice=choice, parallel_tool_calls=False, max_tokens=max_tokens,
                                              temperature=0)
        message = done.choices[0].message
        if not message.tool_calls:
            trace.append({"answer": message.content, "finish_reason": done.choices[0].finish_reason})
            return {"question": question, "trace": trace, "answer": message.content}
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
            trace.append({"call": call.function.name, "arguments": call.function.arguments, "result": result})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return {"question": question, "trace": trace, "answer": None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("question", nargs="?", default="What is 19 plus 23? Use the add tool.")
    p.add_argument("--base-url", default=os.environ.get("SPRIG_BASE_URL", "http://127.0.0.1:30000/v1"))
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=os.environ.get("SPRIG_API_KEY", "unused"))
    print(json.dumps(run_agent(client, args.question), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
