"""Tools and structured output for the chat API: validation, constraint schemas, prompts and call parsing.

How tool calls are produced:
- ``tool_choice`` ``"none"``: tools are shown to the model but its output is plain content.
- ``{"type": "function", "function": {"name": N}}``: the output is constrained by N's ``parameters`` schema and
  becomes one call of N whose ``arguments`` is that JSON text.
- ``"required"``: the output is constrained to a JSON array (at least one item) of ``{"name", "arguments"}``
  objects, each naming a declared tool with arguments valid for its schema; every item becomes one call.
- ``"auto"`` (the default when tools are given): unconstrained; calls are read from the text in the Hermes/Qwen
  format ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; text outside the tags is the content.
Chat templates that do not render ``tools`` get a system message describing the tools and that format.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.runtime.server.http_common import bad_request
from sprig.runtime.server.openai_protocol import (
    FunctionCall,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseFormat,
    ToolCall,
    ToolDef,
)

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
MAX_TOOLS = 128
MAX_SCHEMA_BYTES = 64 << 10  # why: schemas are compiled into automata; huge ones are a denial of service
MAX_SCHEMA_DEPTH = 32
_NAME = re.compile(r"[A-Za-z0-9_\-.]{1,64}")
_CALL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class ToolChoiceKind(Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolPlan:
    """The declared tools (function objects) and how the output relates to them."""

    functions: tuple[dict[str, Any], ...]
    kind: ToolChoiceKind
    name: str | None = None  # the forced function for NAMED

    @property
    def constrained(self) -> bool:
        return self.kind in (ToolChoiceKind.NAMED, ToolChoiceKind.REQUIRED)


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, computed without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_SCHEMA_DEPTH:
            return d
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def check_schema(schema: Any, param: str) -> str:
    """Validate a JSON Schema (size, depth, metaschema) and return it as compact JSON text."""
    if not isinstance(schema, dict):
        raise bad_request("a JSON schema must be an object", param, "invalid_schema")
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise bad_request(f"the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH}", param, "invalid_schema")
    try:
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):
        raise bad_request("the JSON schema is not serializable JSON", param, "invalid_schema") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise bad_request(f"the JSON schema is larger than {MAX_SCHEMA_BYTES} bytes", param, "invalid_schema")
    _metaschema_check(schema, param)
    return text


def _metaschema_check(schema: dict[str, Any], param: str) -> None:
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
    except ImportError:  # why: jsonschema is optional; the grammar compiler validates schemas too
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)[:80]
        raise bad_request(f"invalid JSON schema at '/{where}': {e.message[:160]}", param,
                          "invalid_schema") from None
    except RecursionError:
        raise bad_request("the JSON schema is nested too deeply", param, "invalid_schema") from None


def check_regex(pattern: str, param: str) -> None:
    """Reject a regex that does not compile (the grammar compiler enforces complexity budgets)."""
    if len(pattern) > MAX_SCHEMA_BYTES:
        raise bad_request("the regex is too long", param, "invalid_regex")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise bad_request(f"invalid regex: {str(e)[:160]}", param, "invalid_regex") from None


def response_format_schema(fmt: ResponseFormat | None) -> str | None:
    """The JSON schema text a `response_format` constrains the output with (None for text)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return '{"type":"object"}'
    spec: JsonSchemaFormat | None = fmt.json_schema
    if spec is None or spec.schema_ is None:
        raise bad_request("response_format json_schema needs json_schema.schema", "response_format.json_schema",
                          "invalid_schema")
    return check_schema(spec.schema_, "response_format.json_schema.schema")


def plan_tools(tools: list[ToolDef] | None, choice: str | NamedToolChoice | None) -> ToolPlan | None:
    """Validate tools and tool_choice; None when the request has no tools."""
    if not tools:
        if isinstance(choice, NamedToolChoice) or choice == "required":
            raise bad_request("tool_choice needs tools", "tool_choice", "invalid_tool_choice")
        return None
    if len(tools) > MAX_TOOLS:
        raise bad_request(f"at most {MAX_TOOLS} tools", "tools", "too_many_tools")
    functions = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        fn = tool.function
        if not _NAME.fullmatch(fn.name):
            raise bad_request(f"tool {i}: the name must match [A-Za-z0-9_-.]{{1,64}}", f"tools.{i}.function.name",
                              "invalid_tool")
        if fn.name in seen:
            raise bad_request(f"tool {fn.name!r} is declared twice", f"tools.{i}.function.name", "invalid_tool")
        seen.add(fn.name)
        params = fn.parameters if fn.parameters is not None else EMPTY_PARAMETERS
        check_schema(params, f"tools.{i}.function.parameters")
        functions.append({"name": fn.name, "description": fn.description or "", "parameters": params})
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in seen:
            raise bad_request(f"tool_choice names {choice.function.name[:64]!r}, which is not in tools",
                              "tool_choice", "invalid_tool_choice")
        return ToolPlan(tuple(functions), ToolChoiceKind.NAMED, choice.function.name)
    return ToolPlan(tuple(functions), ToolChoiceKind(choice or "auto"))


def tool_constraint(plan: ToolPlan) -> str | None:
    """The JSON schema text that constrains the output of a named or required tool choice."""
    if plan.kind is ToolChoiceKind.NAMED:
        fn = next(f for f in plan.functions if f["name"] == plan.name)
        return json.dumps(fn["parameters"], separators=(",", ":"))
    if plan.kind is not ToolChoiceKind.REQUIRED:
        return None
    items = [{"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]},
              "required": ["name", "arguments"], "additionalProperties": False} for f in plan.functions]
    item = items[0] if len(items) == 1 else {"anyOf": items}
    return json.dumps({"type": "array", "items": item, "minItems": 1}, separators=(",", ":"))


def tools_system_prompt(plan: ToolPlan) -> str:
    """A system message describing the tools, for chat templates that do not render `tools` themselves."""
    listed = "\n".join(json.dumps({"type": "function", "function": f}, ensure_ascii=False) for f in plan.functions)
    return ("You may call one or more functions to assist with the user query.\n"
            f"Function signatures are within <tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n"
            "For each function call, return a JSON object with the function name and arguments within "
            f'{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} XML tags:\n{TOOL_CALL_OPEN}\n{{"name": <function-name>, '
            f'"arguments": <args-json-object>}}\n{TOOL_CALL_CLOSE}')


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call_from_obj(obj: Any, names: set[str]) -> ToolCall | None:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(new_call_id(), FunctionCall(obj["name"], text))


def calls_from_output(plan: ToolPlan, text: str) -> tuple[str | None, list[ToolCall]]:
    """Split generated text into (content, tool calls) according to the plan."""
    names = {f["name"] for f in plan.functions}
    if plan.kind is ToolChoiceKind.NAMED:
        return None, [ToolCall(new_call_id(), FunctionCall(plan.name or "", text))]
    if plan.kind is ToolChoiceKind.REQUIRED:
        try:
            items = json.loads(text)
        except ValueError:
            return text, []
        calls = [c for c in (_call_from_obj(o, names) for o in (items if isinstance(items, list) else [items])) if c]
        return (None, calls) if calls else (text, [])
    if plan.kind is ToolChoiceKind.NONE:
        return text, []
    return parse_tagged_calls(text, names)


def parse_tagged_calls(text: str, names: set[str]) -> tuple[str | None, list[ToolCall]]:
    """Read `<tool_call>{...}</tool_call>` blocks; blocks that are not valid calls stay in the content."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for m in _CALL_BLOCK.finditer(text):
        try:
            call = _call_from_obj(json.loads(m.group(1)), names)
        except ValueError:
            call = None
        kept.append(text[pos:m.start()] if call else text[pos:m.end()])
        pos = m.end()
        if call:
            calls.append(call)
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return (content or None) if calls else content, calls


class TaggedCallStream:
    """Incremental `auto` parsing for streams: content deltas pass through, tagged calls come out whole."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.buffer = ""
        self.inside = False
        self.calls: list[ToolCall] = []

    def feed(self, delta: str) -> tuple[str, list[ToolCall]]:
        """Consume a text delta; return (content to emit now, calls completed now)."""
        self.buffer += delta
        out: list[str] = []
        done: list[ToolCall] = []
        while True:
            if self.inside:
                end = self.buffer.find(TOOL_CALL_CLOSE)
                if end < 0:
                    break
                block = self.buffer[: end + len(TOOL_CALL_CLOSE)]
                self.buffer = self.buffer[end + len(TOOL_CALL_CLOSE):]
                self.inside = False
                _, calls = parse_tagged_calls(TOOL_CALL_OPEN + block, self.names)
                done.extend(calls)
                if not calls:
                    out.append(TOOL_CALL_OPEN + block)
                continue
            start = self.buffer.find(TOOL_CALL_OPEN)
            if start >= 0:
                out.append(self.buffer[:start])
                self.buffer = self.buffer[start + len(TOOL_CALL_OPEN):]
                self.inside = True
                continue
            keep = _partial_tag_suffix(self.buffer)  # why: "<tool" may be the start of a tag
            out.append(self.buffer[: len(self.buffer) - keep])
            self.buffer = self.buffer[len(self.buffer) - keep:]
            break
        self.calls.extend(done)
        return "".join(out), done

    def flush(self) -> str:
        """Whatever is still held back when the stream ends (an unclosed tag is plain content)."""
        rest = (TOOL_CALL_OPEN if self.inside else "") + self.buffer
        self.buffer, self.inside = "", False
        return rest


def _partial_tag_suffix(text: str) -> int:
    for k in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-k:]):
            return k
    return 0
