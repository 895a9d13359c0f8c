"""Tools and structured output for the chat API: validation, constraint schemas, prompts and call parsing.

How tool calls are produced, in the model family's format (`tool_formats.py`: from the chat template or
``--tool-call-parser``):
- ``tool_choice`` ``"none"``: tools are shown to the model but its output is plain content.
- ``"auto"`` (the default when tools are given): text is free until the model writes its family's call opener;
  from there the call's name and arguments are constrained to the declared tools' schemas (a structural tag,
  `sprig.grammar.structural`), then text is free again. Several calls unless ``parallel_tool_calls`` is false.
  ``constrain_tool_calls: false`` (a sprig extension) leaves the calls unconstrained, parsed after the fact.
- ``"required"`` / a named function: the same format, at least one call forced from the first token
  (exactly one of the named function).
``strict: true`` on a function compiles its schema strictly (only declared keys; unknown keywords refused).
Chat templates that do not render ``tools`` get a system message describing the tools and the format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.grammar.structural import parse_structural_tag
from sprig.runtime.server.http_common import bad_request
from sprig.runtime.server.openai_protocol import (
    FunctionCall,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseFormat,
    ToolCall,
    ToolDef,
)
from sprig.runtime.server.tool_formats import QWEN25, CallParser, ParsedCall, ToolFormat, constrainable

MAX_TOOLS = 128
MAX_SCHEMA_BYTES = 64 << 10  # why: schemas are compiled into automata; huge ones are a denial of service
MAX_SCHEMA_DEPTH = 32
_NAME = re.compile(r"[A-Za-z0-9_\-.]{1,64}")
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
    fmt: ToolFormat = QWEN25
    parallel: bool = True
    strict: tuple[str, ...] = ()  # the functions declared with strict: true
    constrain: bool = True  # auto mode: calls constrained once opened (False: parsed after the fact)
    trigger_token: int | None = None  # the format's trigger as one special token of this tokenizer

    @property
    def constrained(self) -> bool:
        if self.kind is ToolChoiceKind.AUTO:
            return self.constrain and constrainable(self.fmt, forced=False)
        return self.kind is not ToolChoiceKind.NONE

    def parser(self) -> CallParser:
        """A fresh parser of one choice's output."""
        return CallParser(self.fmt, {f["name"] for f in self.functions})


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


def check_schema(schema: Any, param: str, whose: str = "") -> str:
    """Validate a JSON Schema (size, depth, metaschema) and return it as compact JSON text.

    whose: what the message starts with (``tool 'f': ``), so a client with many tools knows which one.
    """
    if not isinstance(schema, dict):
        raise bad_request(f"{whose}a JSON schema must be an object", param, "invalid_schema")
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise bad_request(f"{whose}the JSON schema is nested deeper than {MAX_SCHEMA_DEPTH}", param,
                          "invalid_schema")
    try:
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):
        raise bad_request(f"{whose}the JSON schema is not serializable JSON", param, "invalid_schema") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise bad_request(f"{whose}the JSON schema is larger than {MAX_SCHEMA_BYTES} bytes", param,
                          "invalid_schema")
    _metaschema_check(schema, param, whose)
    return text


def _metaschema_check(schema: dict[str, Any], param: str, whose: str = "") -> None:
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
    except ImportError:  # why: jsonschema is optional; the grammar compiler validates schemas too
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)[:80]
        raise bad_request(f"{whose}invalid JSON schema at '/{where}': {e.message[:160]}", param,
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


def response_format_constraint(fmt: ResponseFormat | None) -> tuple[str, str] | None:
    """(sampling parameter, value) a `response_format` constrains the output with (None for text)."""
    if fmt is not None and fmt.type == "structural_tag":
        return "structural_tag", structural_tag_text(fmt.model_dump(exclude_none=True), "response_format")
    schema = response_format_schema(fmt)
    return None if schema is None else ("json_schema", schema)


def structural_tag_text(raw: dict[str, Any], param: str) -> str:
    """A client's structural tag checked (400 naming the field) and as the engine's JSON text."""
    from sprig.grammar import GrammarError

    try:
        tag = parse_structural_tag(raw)
    except GrammarError as e:
        raise bad_request(str(e), param + (e.param or "")[len("structural_tag"):], "invalid_structural_tag") \
            from None
    for i, s in enumerate(tag.structures):
        check_schema(json.loads(s.schema), f"{param}.structures.{i}.schema")
    return tag.to_json()


def response_format_schema(fmt: ResponseFormat | None) -> str | None:
    """The JSON schema text a `response_format` constrains the output with (None for text)."""
    if fmt is None or fmt.type in ("text", "structural_tag"):
        return None
    if fmt.type == "json_object":
        return '{"type":"object"}'
    spec: JsonSchemaFormat | None = fmt.json_schema
    if spec is None or spec.schema_ is None:
        raise bad_request("response_format json_schema needs json_schema.schema", "response_format.json_schema",
                          "invalid_schema")
    return check_schema(spec.schema_, "response_format.json_schema.schema")


def plan_tools(tools: list[ToolDef] | None, choice: str | NamedToolChoice | None, fmt: ToolFormat = QWEN25,
               parallel: bool | None = None, constrain: bool | None = None) -> ToolPlan | None:
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
        check_schema(params, f"tools.{i}.function.parameters", f"tool {fn.name!r}: ")
        functions.append({"name": fn.name, "description": fn.description or "", "parameters": params})
    strict = tuple(t.function.name for t in tools if t.function.strict)
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in seen:
            raise bad_request(f"tool_choice names {choice.function.name[:64]!r}, which is not in tools",
                              "tool_choice", "invalid_tool_choice")
        kind, name = ToolChoiceKind.NAMED, choice.function.name
    else:
        kind, name = ToolChoiceKind(choice or "auto"), None
    return ToolPlan(tuple(functions), kind, name, fmt, parallel is not False, strict, constrain is not False)


def tool_constraint(plan: ToolPlan) -> str | None:
    """The structural tag (JSON text) that constrains the calls of `plan` (None when they are free)."""
    if not plan.constrained:
        return None
    strict = {name: True for name in plan.strict}
    if plan.kind is ToolChoiceKind.NAMED:
        fns = tuple(f for f in plan.functions if f["name"] == plan.name)
        return plan.fmt.tag(fns, strict, True, False, plan.trigger_token).to_json()
    forced = plan.kind is ToolChoiceKind.REQUIRED
    return plan.fmt.tag(plan.functions, strict, forced, plan.parallel, plan.trigger_token).to_json()


def structure_fields(plan: ToolPlan) -> tuple[str, ...]:
    """The client's name of each structure `tool_constraint` builds (a grammar error names the tool's schema)."""
    index = {f["name"]: i for i, f in enumerate(plan.functions)}
    names = [plan.name] if plan.kind is ToolChoiceKind.NAMED else [f["name"] for f in plan.functions]
    return tuple(f"tools.{index[n]}.function.parameters" for n in names if n is not None)


def tools_system_prompt(plan: ToolPlan) -> str:
    """A system message describing the tools, for chat templates that do not render `tools` themselves."""
    listed = "\n".join(json.dumps({"type": "function", "function": f}, ensure_ascii=False) for f in plan.functions)
    return ("You may call one or more functions to assist with the user query.\n"
            f"Function signatures are within <tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n"
            f"For each function call, write:\n{plan.fmt.instructions}")


def calls_from_output(plan: ToolPlan, text: str) -> tuple[str | None, list[ToolCall]]:
    """Split generated text into (content, complete tool calls) according to the plan's format.

    A call cut short (finish_reason "length") is not a call: its text stays in the content.
    """
    if plan.kind is ToolChoiceKind.NONE:
        return text, []
    parser = plan.parser()
    content = parser.feed(text).content + parser.finish().content
    calls = [as_tool_call(c) for c in parser.complete_calls()]
    if not calls:
        return text, []
    return content.strip() or None, calls


def as_tool_call(call: ParsedCall) -> ToolCall:
    return ToolCall(call.id, FunctionCall(call.name, call.arguments))
