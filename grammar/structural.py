"""Triggered structures: free text until a trigger, then a constrained structure (begin + JSON schema + end).

The spec of SGLang's and vLLM's ``structural_tag`` response format, and what tool calls compile to:

- ``TagMode.TRIGGERED``: text is free until it contains one of the ``triggers``; from there the output must
  complete a structure (its ``begin`` starts with that trigger, then a JSON value valid for its schema, then its
  ``end``), after which text is free again. With ``parallel`` False at most one structure is written. A trigger
  after an odd number of code fences (```) is inside a code block and opens nothing.
- ``TagMode.FORCED``: the output is one structure (several when ``parallel``) from the first token, nothing else.

An ``Envelope`` wraps a run of structures after one trigger (Mistral's ``[TOOL_CALLS] [`` ... ``, `` ... ``]``):
then a structure's ``begin`` does not repeat the trigger. `llg/structural.py` turns a tag into a Lark grammar.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.grammar.errors import GrammarError, GrammarErrorCode

MAX_STRUCTURES = 256
MAX_MARKER_CHARS = 512  # why: begin, end and triggers are literals forced into the output; longer is abuse


class ValueSyntax(Enum):
    """How a structure writes the value its schema describes."""

    JSON = "json"  # a JSON value
    PYTHON_KWARGS = "python_kwargs"  # an object schema's properties as Python keyword arguments: a=1, b="x"


class TagMode(Enum):
    """Whether structures open on a trigger inside free text, or fill the output from its first token."""

    TRIGGERED = "triggered"
    FORCED = "forced"


@dataclass(frozen=True)
class Structure:
    """One constrained structure: `begin`, a JSON value valid for `schema` (JSON text), `end`.

    strict: the schema is compiled as OpenAI's strict function schemas are (only declared keys, unknown
    keywords refused) instead of with JSON Schema's own rules.
    """

    begin: str
    schema: str
    end: str
    strict: bool = False
    syntax: ValueSyntax = ValueSyntax.JSON


@dataclass(frozen=True)
class Envelope:
    """What wraps a run of structures after a trigger: `prefix` (starts with the trigger), `separator`, `suffix`."""

    prefix: str
    separator: str
    suffix: str


@dataclass(frozen=True)
class StructuralTag:
    """Structures and the triggers that open them (see the module docstring)."""

    structures: tuple[Structure, ...]
    triggers: tuple[str, ...]
    mode: TagMode = TagMode.TRIGGERED
    parallel: bool = True
    envelope: Envelope | None = None
    fence_aware: bool = True  # why: a call written inside a markdown code block is an example, not a call
    trigger_tokens: tuple[tuple[str, int], ...] = ()  # triggers that are one special token (no text): their ids

    def token_of(self, trigger: str) -> int | None:
        return dict(self.trigger_tokens).get(trigger)

    def to_json(self) -> str:
        """The tag as canonical JSON text (what a `GrammarSpec` carries to a compile worker)."""
        return json.dumps(_as_dict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StructuralTag:
        """Read `to_json`'s text, or a client's ``structural_tag`` object as SGLang and vLLM accept it."""
        try:
            obj = json.loads(text)
        except ValueError:
            raise _bad("structural_tag is not JSON") from None
        return parse_structural_tag(obj)

    def triggers_of(self, structure: Structure) -> tuple[str, ...]:
        """The triggers whose occurrence may open `structure`."""
        if self.envelope is not None:
            return tuple(t for t in self.triggers if self.envelope.prefix.startswith(t))
        return tuple(t for t in self.triggers if structure.begin.startswith(t))


def parse_structural_tag(obj: Any) -> StructuralTag:
    """A client's ``{"structures": [{"begin", "schema", "end"}], "triggers": [...]}``; GrammarError naming the field."""
    if not isinstance(obj, dict):
        raise _bad("structural_tag must be an object")
    raw = obj.get("structures")
    if not isinstance(raw, list) or not raw:
        raise _bad("structural_tag.structures must be a non-empty list", "structures")
    if len(raw) > MAX_STRUCTURES:
        raise _bad(f"structural_tag has more than {MAX_STRUCTURES} structures", "structures")
    triggers = obj.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise _bad("structural_tag.triggers must be a non-empty list of non-empty strings", "triggers")
    structures = tuple(_structure(s, i) for i, s in enumerate(raw))
    envelope = _envelope(obj.get("envelope"))
    tokens = obj.get("trigger_tokens", {})
    if not isinstance(tokens, dict) or not all(isinstance(v, int) and v >= 0 for v in tokens.values()):
        raise _bad("structural_tag.trigger_tokens must map triggers to token ids", "trigger_tokens")
    tag = StructuralTag(structures, tuple(_marker(t, "triggers") for t in triggers),
                        TagMode(obj.get("mode", "triggered")) if obj.get("mode") in (None, "triggered", "forced")
                        else _mode_error(), bool(obj.get("parallel", True)), envelope,
                        bool(obj.get("fence_aware", True)), tuple(sorted((str(k), v) for k, v in tokens.items())))
    for i, s in enumerate(structures):
        if not tag.triggers_of(s):
            raise _bad(f"structural_tag.structures[{i}].begin starts with none of the triggers",
                       f"structures.{i}.begin")
    return tag


def _structure(raw: Any, i: int) -> Structure:
    if not isinstance(raw, dict):
        raise _bad(f"structural_tag.structures[{i}] must be an object", f"structures.{i}")
    schema = raw.get("schema", raw.get("parameters"))
    if isinstance(schema, dict | bool):
        schema = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    if not isinstance(schema, str) or not _is_json(schema):
        raise _bad(f"structural_tag.structures[{i}].schema must be a JSON schema", f"structures.{i}.schema")
    for key in ("begin", "end"):
        if not isinstance(raw.get(key), str):
            raise _bad(f"structural_tag.structures[{i}].{key} must be a string", f"structures.{i}.{key}")
    try:
        syntax = ValueSyntax(raw.get("syntax", "json"))
    except ValueError:
        raise _bad(f"structural_tag.structures[{i}].syntax must be 'json' or 'python_kwargs'",
                   f"structures.{i}.syntax") from None
    return Structure(_marker(raw["begin"], f"structures.{i}.begin"), schema,
                     _marker(raw["end"], f"structures.{i}.end"), bool(raw.get("strict", False)), syntax)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _envelope(raw: Any) -> Envelope | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("prefix", "separator", "suffix")):
        raise _bad("structural_tag.envelope needs string prefix, separator and suffix", "envelope")
    return Envelope(_marker(raw["prefix"], "envelope"), _marker(raw["separator"], "envelope"),
                    _marker(raw["suffix"], "envelope"))


def _marker(text: str, where: str) -> str:
    if len(text) > MAX_MARKER_CHARS:
        raise _bad(f"structural_tag.{where} is longer than {MAX_MARKER_CHARS} characters", where)
    return text


def _mode_error() -> TagMode:
    raise _bad("structural_tag.mode must be 'triggered' or 'forced'", "mode")


def _as_dict(tag: StructuralTag) -> dict[str, Any]:
    out: dict[str, Any] = {
        "structures": [{"begin": s.begin, "schema": json.loads(s.schema), "end": s.end, "strict": s.strict,
                        "syntax": s.syntax.value} for s in tag.structures],
        "triggers": list(tag.triggers), "mode": tag.mode.value, "parallel": tag.parallel,
        "fence_aware": tag.fence_aware}
    if tag.trigger_tokens:
        out["trigger_tokens"] = dict(tag.trigger_tokens)
    if tag.envelope is not None:
        e = tag.envelope
        out["envelope"] = {"prefix": e.prefix, "separator": e.separator, "suffix": e.suffix}
    return out


def _bad(message: str, where: str = "") -> GrammarError:
    return GrammarError(message, GrammarErrorCode.INVALID_GRAMMAR,
                        param="structural_tag" + (f".{where}" if where else ""))

