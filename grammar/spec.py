"""What a request asks to be constrained by: the kind of constraint, its text and the JSON options."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

_ABSOLUTE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


class GrammarKind(Enum):
    """The kinds of constraint a request can carry."""

    JSON_SCHEMA = "json_schema"  # spec: the schema as JSON text (or a dict, serialized on construction)
    REGEX = "regex"  # spec: a regular expression the whole output must match
    CHOICES = "choices"  # spec: the output is exactly one of these strings
    JSON_OBJECT = "json_object"  # spec: ignored; the output is any JSON object
    EBNF = "ebnf"  # spec: a grammar as GBNF (llama.cpp), xgrammar-style EBNF or Lark; llguidance backend only
    STRUCTURAL_TAG = "structural_tag"  # spec: a `structural.StructuralTag` as JSON text; llguidance backend only


class Whitespace(Enum):
    """Where generated JSON may put whitespace."""

    COMPACT = "compact"  # {"a":1,"b":[1,2]} -- what json.dumps(separators=(",", ":")) writes
    SPACED = "spaced"  # {"a": 1, "b": [1, 2]} -- what json.dumps writes by default
    FLEXIBLE = "flexible"  # up to `max_whitespace` JSON whitespace characters around every token


@dataclass(frozen=True)
class JsonOptions:
    """How a JSON schema is turned into a grammar.

    strict: refuse keywords that are not JSON Schema vocabulary and unknown formats (True), or ignore them
        as annotations, which is JSON Schema's own rule (False, the default). Validation keywords sprig
        cannot enforce are refused either way; annotations (title, description, examples, default, ...)
        are always accepted because they constrain nothing.
    max_recursion_depth (outlines backend only; the llguidance backend recurses without bound): how many
        times a recursive ``$ref`` may be entered inside itself; deeper values are
        not generated (the grammar accepts a subset of the schema's language, never more).
    any_value_depth (outlines backend only; llguidance allows any depth): where a schema leaves a value unconstrained (``{}``, ``true``, a missing ``items``),
        arrays and objects inside it may nest down to this depth below the top of the document (a value at
        depth k gets any_value_depth - k levels). A regex cannot count brackets, so some bound is needed.
    allow_extra_properties: JSON Schema lets an object that declares `properties` but says nothing about
        `additionalProperties` have any other keys too (True, exact). False generates only the declared
        keys there, as OpenAI's strict structured outputs and xgrammar's strict mode do: a subset of the
        schema's language (output stays valid), much smaller automata, and no invented keys.
    documents: other schema documents a `$ref` may name, as (absolute URI, schema JSON text) pairs, for
        schemas split over several files (`{"$ref": "https://example.com/defs.json#/$defs/id"}`). Nothing is
        fetched: a `$ref` to a document that is neither here nor an official meta-schema is refused.
    """

    whitespace: Whitespace = Whitespace.COMPACT
    max_whitespace: int = 2
    strict: bool = False
    max_recursion_depth: int = 3
    any_value_depth: int = 2
    allow_extra_properties: bool = True
    documents: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for pair in self.documents:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise ValueError("documents: each entry must be a (URI, schema JSON text) pair of strings")
            if not _ABSOLUTE_URI.match(pair[0]) or "#" in pair[0]:
                raise ValueError(f"documents: {pair[0][:80]!r} is not an absolute URI without a fragment")

    def key(self) -> str:
        docs = hashlib.sha256(json.dumps(self.documents).encode()).hexdigest()[:16] if self.documents else ""
        return (f"{self.whitespace.value}:{self.max_whitespace}:{int(self.strict)}:{self.max_recursion_depth}"
                f":{self.any_value_depth}:{int(self.allow_extra_properties)}:{docs}")


PARAM_BY_KIND = {
    GrammarKind.JSON_SCHEMA: "json_schema",
    GrammarKind.REGEX: "regex",
    GrammarKind.CHOICES: "choices",
    GrammarKind.JSON_OBJECT: "response_format",
    GrammarKind.EBNF: "ebnf",
    GrammarKind.STRUCTURAL_TAG: "structural_tag",
}


@dataclass(frozen=True)
class GrammarSpec:
    """A constraint as the request gave it. Build with the class methods or directly."""

    kind: GrammarKind
    spec: str | tuple[str, ...] = ""
    options: JsonOptions = field(default_factory=JsonOptions)

    def __post_init__(self) -> None:
        if isinstance(self.spec, dict | bool) and self.kind is GrammarKind.JSON_SCHEMA:
            object.__setattr__(self, "spec", _dump_schema(self.spec))  # why: one form (text) for keys and workers
        elif isinstance(self.spec, list):
            object.__setattr__(self, "spec", tuple(self.spec))

    @classmethod
    def json_schema(cls, schema: str | dict[str, Any] | bool, options: JsonOptions | None = None) -> GrammarSpec:
        """From schema text or a parsed schema; raises GrammarError if a parsed schema is not JSON."""
        text = schema if isinstance(schema, str) else _dump_schema(schema)
        return cls(GrammarKind.JSON_SCHEMA, text, options or JsonOptions())

    @classmethod
    def regex(cls, pattern: str) -> GrammarSpec:
        return cls(GrammarKind.REGEX, pattern)

    @classmethod
    def choices(cls, choices: list[str] | tuple[str, ...]) -> GrammarSpec:
        return cls(GrammarKind.CHOICES, tuple(choices))

    @classmethod
    def ebnf(cls, grammar: str) -> GrammarSpec:
        """A grammar: GBNF / xgrammar EBNF (`root ::= ...`) or Lark (`start: ...`); llguidance backend."""
        return cls(GrammarKind.EBNF, grammar)

    @classmethod
    def structural_tag(cls, tag_json: str, options: JsonOptions | None = None) -> GrammarSpec:
        """Free text with triggered structures (`structural.StructuralTag.to_json()`); llguidance backend.

        JSON whitespace is flexible by default: a model writes its calls the way its training data spelled them.
        """
        return cls(GrammarKind.STRUCTURAL_TAG, tag_json, options or JsonOptions(whitespace=Whitespace.FLEXIBLE))

    @classmethod
    def json_object(cls, options: JsonOptions | None = None) -> GrammarSpec:
        return cls(GrammarKind.JSON_OBJECT, "", options or JsonOptions())

    @property
    def param(self) -> str:
        """The request field this constraint came from, for error messages."""
        return PARAM_BY_KIND[self.kind]

    def canonical_key(self) -> str:
        """A digest equal for specs that compile to the same grammar (JSON re-serialized, key order kept)."""
        if self.kind is GrammarKind.JSON_SCHEMA:
            body = _canonical_json(str(self.spec)) + "\x00" + self.options.key()
        elif self.kind is GrammarKind.JSON_OBJECT:
            body = self.options.key()
        elif self.kind is GrammarKind.STRUCTURAL_TAG:
            body = _canonical_json(str(self.spec)) + "\x00" + self.options.key()
        elif self.kind is GrammarKind.CHOICES:
            body = json.dumps(list(self.spec), ensure_ascii=False)
        else:
            body = str(self.spec)
        return hashlib.sha256(f"{self.kind.value}\x00{body}".encode("utf-8", "surrogatepass")).hexdigest()


def _dump_schema(schema: Any) -> str:
    from sprig.grammar.errors import GrammarError, too_complex

    try:
        return json.dumps(schema, ensure_ascii=False)
    except RecursionError:
        raise too_complex("schema nested too deeply").with_param("json_schema") from None
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"schema is not JSON: {str(exc)[:120]}", param="json_schema") from None


def _canonical_json(text: str) -> str:
    # why: whitespace and escapes differ between clients; property order is meaning (it is the output order)
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return text  # invalid or too deep: the compiler reports it, the key just has to be stable
