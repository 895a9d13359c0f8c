"""Tool calls on the real model: how many "auto"-mode calls have schema-valid arguments, constrained vs not.

    sprig serve --num-threads 1 &                       # SmolLM2-135M-Instruct (Q4_1 GGUF) on :30000
    python benchmarks/tool_calls_real.py --requests 200 # or --base-url http://HOST:PORT/v1

Sends `--requests` chat requests in tool_choice "auto" with three tools, once with triggered constraints (the
default) and once with ``constrain_tool_calls: false`` (the call is free text, parsed after the fact), and counts
the calls the model opened (its output contains the format's trigger), the complete calls reported, and the
share of those whose arguments validate against the tool's schema. Then a multi-turn round trip through the
openai client (call → tool result message → answer) and a structural-tag request. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import jsonschema
import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 40},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 80},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["query"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = [
    "What is the weather in {city} in {unit}?", "Add {a} and {b}.", "Search the web for {topic}.",
    "Is it raining in {city}?", "What is {a} plus {b}?", "Find news about {topic}.",
]
NUDGE = [{"role": "system", "content": "Answer by calling one of the functions, with no text before the call."}]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Denver", "Pune", "Quito"]
TOPICS = ["solar panels", "chess openings", "sourdough bread", "the Rust language", "tides"]


def question(i: int) -> str:
    return QUESTIONS[i % len(QUESTIONS)].format(city=CITIES[i % len(CITIES)], unit=["celsius", "fahrenheit"][i % 2],
                                                a=i * 7 % 100, b=i * 13 % 100, topic=TOPICS[i % len(TOPICS)])


def valid(name: str, arguments: str) -> bool:
    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def auto_mode(client: openai.OpenAI, model: str, requests: int, constrain: bool, max_tokens: int,
              nudge: bool) -> dict[str, Any]:
    opened = calls = good = 0
    start = time.perf_counter()
    raw_invalid: list[str] = []
    for i in range(requests):
        res = client.chat.completions.create(
            model=model, messages=[*NUDGE[:nudge], {"role": "user", "content": question(i)}], tools=TOOLS,
            tool_choice="auto",
            max_tokens=max_tokens, temperature=0.7, seed=i, extra_body={"constrain_tool_calls": constrain,
                                                                        "skip_special_tokens": False})
        msg = res.choices[0].message
        text = (msg.content or "") + "".join(c.function.arguments for c in msg.tool_calls or [])
        made = msg.tool_calls or []
        opened += bool(made) or "<tool_call>" in text
        calls += len(made)
        ok = [valid(c.function.name, c.function.arguments) for c in made]
        good += sum(ok)
        if "<tool_call>" in (msg.content or "") and len(raw_invalid) < 3:
            raw_invalid.append((msg.content or "")[:200])
    return {"requests": requests, "responses_with_a_call_opened": opened, "complete_calls": calls,
            "schema_valid_calls": good, "valid_share": round(good / calls, 3) if calls else None,
            "examples_of_unparsed_calls": raw_invalid, "seconds": round(time.perf_counter() - start, 1)}


def opened_calls(client: openai.OpenAI, model: str, requests: int, constrain: bool) -> dict[str, Any]:
    """Calls the model is made to open: the ChatML prompt ends with the opener, so every answer is a call.

    Measures the arguments of calls once opened (what a trigger constrains) on many more calls than "auto" mode,
    where SmolLM2-135M opens few. Constrained: a forced structural tag with each tool's name and schema.
    """
    from sprig.runtime.server.openai_protocol import ToolDef
    from sprig.runtime.server.openai_tools import plan_tools, tools_system_prompt
    from sprig.runtime.server.tool_formats import QWEN25

    plan = plan_tools([ToolDef.model_validate(t) for t in TOOLS], "auto")
    assert plan is not None
    system = tools_system_prompt(plan)
    structures = [{"begin": f'{{"name": "{n}", "arguments": ', "schema": s, "end": "}\n</tool_call>"}
                  for n, s in SCHEMAS.items()]
    tag = {"type": "structural_tag", "triggers": ['{"name": "'], "structures": structures, "mode": "forced",
           "parallel": False}
    good = parsed = 0
    start = time.perf_counter()
    for i in range(requests):
        prompt = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question(i)}<|im_end|>\n"
                  f"<|im_start|>assistant\n{QWEN25.trigger}\n")
        extra: dict[str, Any] = {"response_format": tag} if constrain else {"stop": ["</tool_call>"]}
        res = client.completions.create(model=model, prompt=prompt, max_tokens=96, temperature=0.7, seed=i,
                                        extra_body=extra)
        text = res.choices[0].text.split("</tool_call>")[0].strip()
        try:
            call = json.loads(text[: text.rfind("}") + 1])
            name, args = call["name"], call["arguments"]
            parsed += 1
            good += name in SCHEMAS and valid(name, json.dumps(args))
        except (ValueError, KeyError, TypeError):
            pass
    return {"requests": requests, "parsed_as_a_call": parsed, "schema_valid_calls": good,
            "valid_share": round(good / requests, 3), "seconds": round(time.perf_counter() - start, 1)}


def round_trip(client: openai.OpenAI, model: str) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris in celsius?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="required",
                                           max_tokens=64, temperature=0, parallel_tool_calls=False)
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"celsius": 18, "sky": "clear"})}]
    answer = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=48,
                                            temperature=0, tool_choice="none")
    return {"call": {"name": call.function.name, "arguments": call.function.arguments},
            "finish_reasons": [first.choices[0].finish_reason, answer.choices[0].finish_reason],
            "answer": answer.choices[0].message.content}


def structural_tag(client: openai.OpenAI, model: str, forced: bool = False) -> dict[str, Any]:
    """A structural-tag request; `forced` (a sprig extension, "mode": "forced") writes the structure at once."""
    fmt: dict[str, Any] = {"type": "structural_tag", "triggers": ["<answer>"], "structures": [
        {"begin": "<answer>", "schema": {"type": "object", "properties": {"capital": {"type": "string"}},
                                         "required": ["capital"], "additionalProperties": False},
         "end": "</answer>"}]}
    if forced:
        fmt = {**fmt, "mode": "forced", "parallel": False}
    res = client.chat.completions.create(
        model=model, max_tokens=64, temperature=0, response_format=fmt,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "What is the capital of France? Think, then write "
                                              '<answer>{"capital": ...}</answer>.'}])
    return {"content": res.choices[0].message.content, "finish_reason": res.choices[0].finish_reason}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--nudge", action="store_true", help="a system message asking for a call (more calls opened)")
    p.add_argument("--sections", default="", help="comma-separated: round_trip, structural_tag, "
                                                  "structural_tag_forced, constrained, unconstrained (default: all)")
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    sections = {"round_trip": lambda: round_trip(client, model),
                "structural_tag": lambda: structural_tag(client, model),
                "structural_tag_forced": lambda: structural_tag(client, model, forced=True),
                "constrained": lambda: auto_mode(client, model, args.requests, True, args.max_tokens, args.nudge),
                "unconstrained": lambda: auto_mode(client, model, args.requests, False, args.max_tokens, args.nudge),
                "opened_constrained": lambda: opened_calls(client, model, args.requests, True),
                "opened_unconstrained": lambda: opened_calls(client, model, args.requests, False)}
    chosen = args.sections.split(",") if args.sections else list(sections)
    for name in chosen:
        section = sections[name]  # why: one line per section as it finishes (a long run shows progress)
        print(json.dumps({"model": model, name: section()}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
