"""`gen(tools=...)`: free text in which the model may call tools, every call exact to its tool's schema.

The chat API's ``tool_choice: "auto"``, run by the program over any backend that takes stop strings and JSON
schemas: text is generated freely until the model writes the call opener ``<tool_call>`` (a stop string, so it is
matched in the text whatever the tokens); the call is then generated under a JSON schema that admits exactly the
declared tools' ``{"name", "arguments"}`` objects, ``</tool_call>`` closes it, and free text resumes. The format is
the Hermes / Qwen 2.5 one, the chat API's for templates without their own (SmolLM2-Instruct's included). Each
segment is one backend call; the prefix cache serves the repeated prompt. A call cut by `max_tokens` is not reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sprig.lang.errors import InvalidArgumentError, UnsupportedError

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
MAX_TOOL_CALLS = 16  # why: bounds the backend calls of one gen (one free segment and one call segment per call)
_NAME = re.compile(r"[A-Za-z0-9_\-.]{1,64}")


@dataclass(frozen=True)
class ToolSpec:
    """One declared tool: its name and its arguments' JSON schema (as JSON text)."""

    name: str
    parameters: str


def parse_tools(tools: Sequence[dict[str, Any]]) -> tuple[ToolSpec, ...]:
    """OpenAI tool objects (``{"type": "function", "function": {...}}``) or bare function objects, validated."""
    if isinstance(tools, dict | str) or not tools:
        raise InvalidArgumentError("tools must be a non-empty list of tool objects", param="tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not _NAME.fullmatch(fn["name"]):
            raise InvalidArgumentError(f"tools[{i}] needs a name matching [A-Za-z0-9_-.]{{1,64}}", param="tools")
        parameters = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise InvalidArgumentError(f"tools[{i}].parameters must be a JSON schema object", param="tools")
        if any(s.name == fn["name"] for s in specs):
            raise InvalidArgumentError(f"tool {fn['name']!r} is declared twice", param="tools")
        specs.append(ToolSpec(fn["name"], json.dumps(parameters, separators=(",", ":"))))
    return tuple(specs)


def call_schema(tools: tuple[ToolSpec, ...]) -> str:
    """The JSON schema of one call: a declared tool's name with arguments valid for that tool's schema."""
    options = [{"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
                "properties": {"name": {"const": t.name}, "arguments": json.loads(t.parameters)}} for t in tools]
    return json.dumps(options[0] if len(options) == 1 else {"anyOf": options}, separators=(",", ":"))


def opened_call(meta: dict[str, Any]) -> bool:
    """Whether a free segment stopped because the model wrote the call opener; an UnsupportedError when the backend
    does not say which stop matched (an OpenAI-compatible server without SGLang's `matched_stop`)."""
    finish = meta.get("finish_reason") or {}
    if not isinstance(finish, dict) or finish.get("type") != "stop":
        return False
    if finish.get("matched") is None:
        raise UnsupportedError("gen(tools=...) needs a backend that reports which stop matched (sprig's engine, "
                               "its /generate, SGLang servers)")
    return finish["matched"] == TOOL_CALL_OPEN


def call_of(text: str) -> dict[str, str]:
    """The call a completed call segment wrote, as the chat API reports one: ``{"name", "arguments"}`` with the
    arguments as JSON text (valid for the tool's schema by construction)."""
    obj = json.loads(text)
    return {"name": obj["name"], "arguments": json.dumps(obj["arguments"], ensure_ascii=False)}
