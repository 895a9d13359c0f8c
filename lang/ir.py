"""The program's intermediate representation: what `s += ...` appends, as plain dataclasses.

Nodes compose with `+` (``"Q: " + gen("a")``), so one `+=` can append text, roles and model calls in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from sprig.lang.tool_calls import ToolSpec


class Role(str, Enum):
    """Chat roles; each renders with the model's own chat template."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class SelectMethod(str, Enum):
    """How `select` turns the choices' token logprobs into a decision (see `sprig.lang.select_scoring`)."""

    TOKEN_LENGTH_NORMALIZED = "token_length_normalized"
    GREEDY_TOKEN = "greedy_token"
    UNCONDITIONAL_NORMALIZED = "unconditional_likelihood_normalized"


class Dtype(str, Enum):
    """What `gen(dtype=...)` constrains the output to and converts the value into."""

    STR = "str"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"


class Node:
    """Base of everything that can be appended to a program state."""

    def __add__(self, other: Any) -> Seq:
        return Seq((*flatten(self), *flatten(to_node(other))))

    def __radd__(self, other: Any) -> Seq:
        return Seq((*flatten(to_node(other)), *flatten(self)))


@dataclass(frozen=True)
class Text(Node):
    """Literal text appended to the prompt."""

    text: str


@dataclass(frozen=True)
class RoleBegin(Node):
    """Opens a chat turn: appends the template's text that starts a message of `role`."""

    role: Role


@dataclass(frozen=True)
class RoleEnd(Node):
    """Closes the open chat turn: appends the template's text that ends it."""

    role: Role


@dataclass(frozen=True)
class GenParams:
    """Sampling options of one `gen`; `None` means the program's default (then the backend's)."""

    max_tokens: int | None = None
    min_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    stop_token_ids: tuple[int, ...] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool | None = None
    seed: int | None = None
    regex: str | None = None
    json_schema: str | None = None
    choices: tuple[str, ...] | None = None
    priority: int | None = None  # a request field, not a sampling one: backends send it beside the params

    def merged_over(self, defaults: GenParams) -> GenParams:
        """These params with every unset field taken from `defaults`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return GenParams(**{k: v if v is not None else getattr(defaults, k) for k, v in values.items()})

    def to_sampling_params(self) -> dict[str, Any]:
        """The SGLang-style `sampling_params` dict every backend speaks (unset fields left out); a set
        `priority` rides along under that key and each backend moves it to its request (`split_priority`)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            key = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}.get(f.name, f.name)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class Gen(Node):
    """A model call that appends its output and stores it under `name`."""

    name: str | None
    params: GenParams = field(default_factory=GenParams)
    dtype: Dtype = Dtype.STR
    tools: tuple[ToolSpec, ...] | None = None  # the model may call these (lang/tool_calls.py)


@dataclass(frozen=True)
class Select(Node):
    """Picks one of `choices` by scoring each after the prompt, appends it and stores it under `name`."""

    name: str | None
    choices: tuple[str, ...]
    method: SelectMethod = SelectMethod.TOKEN_LENGTH_NORMALIZED


@dataclass(frozen=True)
class Seq(Node):
    """Several nodes appended in order."""

    items: tuple[Node, ...]


def to_node(value: Any) -> Node:
    """A node from what users append: nodes as they are, strings as text."""
    if isinstance(value, Node):
        return value
    if isinstance(value, str):
        return Text(value)
    raise TypeError(f"cannot append {type(value).__name__} to a program state (use str, gen, select or a role)")


def flatten(node: Node) -> tuple[Node, ...]:
    """The leaf nodes of `node` in order."""
    if isinstance(node, Seq):
        return tuple(leaf for item in node.items for leaf in flatten(item))
    return (node,)
