"""The user-facing primitives: `gen`, `select` and the chat roles (each returns an IR node)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sprig.lang.errors import InvalidArgumentError
from sprig.lang.ir import (
    Dtype,
    Gen,
    GenParams,
    Node,
    Role,
    RoleBegin,
    RoleEnd,
    Select,
    SelectMethod,
    Seq,
    to_node,
)
from sprig.lang.tool_calls import parse_tools

# The patterns `dtype` constrains output to; bounded so that the conversion never overflows.
INT_REGEX = r"-?(0|[1-9][0-9]{0,17})"
FLOAT_REGEX = r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,8})?"
BOOL_CHOICES = ("True", "False")

_DTYPES: dict[Any, Dtype] = {str: Dtype.STR, int: Dtype.INT, float: Dtype.FLOAT, bool: Dtype.BOOL}


def gen(
    name: str | None = None,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    repetition_penalty: float | None = None,
    regex: str | None = None,
    json_schema: str | dict[str, Any] | None = None,
    choices: Sequence[str] | None = None,
    dtype: type | Dtype | None = None,
    *,
    min_tokens: int | None = None,
    stop_token_ids: Sequence[int] | None = None,
    ignore_eos: bool | None = None,
    seed: int | None = None,
    priority: int | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
) -> Gen:
    """Generate text after the current prompt, append it, and store it as `s[name]`.

    Unset options fall back to the defaults given to `run`. `regex`, `json_schema` (a dict or a JSON string)
    and `choices` constrain the output through the backend's grammar; `dtype` (int, float, bool or str)
    constrains it to a literal of that type and stores the converted value. A higher `priority` is scheduled
    first by a sprig (or SGLang) server. `tools` (OpenAI tool objects) lets the model call them as the chat API's
    "auto" mode does: `s[name]` is the whole text and `s.get_meta_info(name)["tool_calls"]` the calls, each exact to
    its tool's schema (lang/tool_calls.py).
    """
    kind = _dtype(dtype)
    if tools is not None and (kind is not Dtype.STR or any(x is not None for x in (regex, json_schema, choices))):
        raise InvalidArgumentError("tools cannot be combined with regex, json_schema, choices or dtype", param="tools")
    if sum(x is not None for x in (regex, json_schema, choices)) > 1:
        raise InvalidArgumentError("give at most one of regex, json_schema and choices", param="regex")
    if kind is not Dtype.STR and (json_schema is not None or choices is not None):
        raise InvalidArgumentError("dtype cannot be combined with json_schema or choices", param="dtype")
    if kind is Dtype.INT and regex is None:
        regex = INT_REGEX
    elif kind is Dtype.FLOAT and regex is None:
        regex = FLOAT_REGEX
    elif kind is Dtype.BOOL and regex is None:
        choices = BOOL_CHOICES
    if isinstance(json_schema, dict):
        json_schema = json.dumps(json_schema)
    if choices is not None:
        choices = _choice_tuple(choices, "choices")
    params = GenParams(
        max_tokens=max_tokens, min_tokens=min_tokens, stop=_str_tuple(stop), stop_token_ids=_tuple(stop_token_ids),
        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty, repetition_penalty=repetition_penalty, ignore_eos=ignore_eos, seed=seed,
        regex=regex, json_schema=json_schema, choices=choices, priority=priority,
    )
    return Gen(_name(name), params, kind, parse_tools(tools) if tools is not None else None)


def select(
    name: str | None = None,
    choices: Sequence[str] | None = None,
    method: SelectMethod | str = SelectMethod.TOKEN_LENGTH_NORMALIZED,
) -> Select:
    """Choose one of `choices` by its likelihood after the current prompt, append it, store it as `s[name]`.

    `method` is a `SelectMethod` (or its value): token-length-normalized mean logprob by default,
    `greedy_token` or `unconditional_likelihood_normalized`. Scores are in `s.get_meta_info(name)`.
    """
    if choices is None:
        raise InvalidArgumentError("select needs choices", param="choices")
    try:
        method = SelectMethod(method)
    except ValueError:
        known = ", ".join(m.value for m in SelectMethod)
        raise InvalidArgumentError(f"unknown select method {method!r} (known: {known})", param="method") from None
    return Select(_name(name), _choice_tuple(choices, "choices"), method)


def _role(role: Role, content: Any) -> Node:
    if content is None:
        raise InvalidArgumentError(f"sprig.{role.value}() needs content; use `with s.{role.value}():` for a block",
                                   param="content")
    return Seq((RoleBegin(role), to_node(content), RoleEnd(role)))


def system(content: Any) -> Node:
    """A whole system message (text, or nodes such as `gen`) rendered with the chat template."""
    return _role(Role.SYSTEM, content)


def user(content: Any) -> Node:
    """A whole user message (text, or nodes such as `gen`) rendered with the chat template."""
    return _role(Role.USER, content)


def assistant(content: Any) -> Node:
    """A whole assistant message (usually `gen(...)`) rendered with the chat template."""
    return _role(Role.ASSISTANT, content)


def system_begin() -> RoleBegin:
    """Opens a system message (close it with `system_end()`)."""
    return RoleBegin(Role.SYSTEM)


def system_end() -> RoleEnd:
    """Closes the open system message."""
    return RoleEnd(Role.SYSTEM)


def user_begin() -> RoleBegin:
    """Opens a user message (close it with `user_end()`)."""
    return RoleBegin(Role.USER)


def user_end() -> RoleEnd:
    """Closes the open user message."""
    return RoleEnd(Role.USER)


def assistant_begin() -> RoleBegin:
    """Opens an assistant message (close it with `assistant_end()`)."""
    return RoleBegin(Role.ASSISTANT)


def assistant_end() -> RoleEnd:
    """Closes the open assistant message."""
    return RoleEnd(Role.ASSISTANT)


def _dtype(dtype: type | Dtype | None) -> Dtype:
    if dtype is None:
        return Dtype.STR
    if isinstance(dtype, Dtype):
        return dtype
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise InvalidArgumentError("dtype must be int, float, bool or str", param="dtype")


def _name(name: str | None) -> str | None:
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError("a variable name must be a non-empty string", param="name")
    return name


def _str_tuple(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _tuple(value: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


def _choice_tuple(choices: Sequence[str], param: str) -> tuple[str, ...]:
    if isinstance(choices, str) or not all(isinstance(c, str) for c in choices):
        raise InvalidArgumentError(f"{param} must be a list of strings", param=param)
    if not choices or any(not c for c in choices):
        raise InvalidArgumentError(f"{param} must be a non-empty list of non-empty strings", param=param)
    if len(set(choices)) != len(choices):
        raise InvalidArgumentError(f"{param} must not repeat a choice", param=param)
    return tuple(choices)
