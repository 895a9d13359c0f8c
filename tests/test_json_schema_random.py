"""Random schemas from a grammar of JSON Schema keywords, checked against jsonschema (issue 33, item 4).

hypothesis draws a schema (types, bounds, integer `multipleOf`, lengths, patterns, the formats sprig
enforces, enum/const, objects with properties / required / additionalProperties / min-maxProperties /
propertyNames / patternProperties, arrays with items / prefixItems / bounds / uniqueItems (over enums and
closed objects), allOf / anyOf / oneOf / if-then-else, `not` over leaves, `required` and the key rules
(additionalProperties, propertyNames, patternProperties),
nested two levels), then instances: valid ones from hypothesis-jsonschema's generator and arbitrary JSON
values (mostly invalid), those whose numbers fit the grammar's documented digit limits. Each is walked token by token; the walk must accept exactly when jsonschema,
with the formats sprig enforces asserted, says valid. A refusal must name its keyword. Runs a few hundred
schemas in well under two minutes (SPRIG_RANDOM_SCHEMAS=n for more).
"""

from __future__ import annotations

import contextlib
import os

import jsonschema
import pytest
from grammar_helpers import format_checker, walk
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from sprig.grammar import GrammarError, GrammarSpec
from sprig.grammar.schema.ordering import SchemaOrderer

hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema")  # why: a dev extra (pyproject [dev])

EXAMPLES = int(os.environ.get("SPRIG_RANDOM_SCHEMAS", "250"))
NAMES = ["id", "name", "tags", "kind", "size"]
PATTERNS = ["^[a-z]+$", "^[A-Z][a-z]*$", "[0-9]", "^(ab|cd)+$", "^x-"]
FORMATS = ["date", "email", "uuid", "ipv4", "date-time"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.sampled_from([0.5, 2.5, -1.25]),
                    st.sampled_from(["a", "b", "ab", "x-1", "Zed", "2024-01-02"]))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES + ["x", "y"]), inner, max_size=4)),
    max_leaves=8)

KEY_RULES = st.sampled_from([{"maxLength": 2}, {"pattern": "^[a-z]+$"}, {"enum": ["id", "name", "x", "y"]},
                             {"not": {"const": "kind"}}])


def optional(draw, key: str, strategy: st.SearchStrategy) -> dict:
    return {key: draw(strategy)} if draw(st.booleans()) else {}


@st.composite
def leaf_schemas(draw) -> dict:
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "null", "enum", "const"]))
    if kind == "string":
        schema: dict = {"type": "string", **optional(draw, "minLength", st.integers(0, 3)),
                        **optional(draw, "maxLength", st.integers(2, 8))}
        choice = draw(st.sampled_from(["none", "pattern", "format"]))
        if choice == "pattern":
            schema["pattern"] = draw(st.sampled_from(PATTERNS))
        elif choice == "format":
            schema = {"type": "string", "format": draw(st.sampled_from(FORMATS))}
        return schema
    if kind in ("integer", "number"):
        schema = {"type": kind, **optional(draw, "minimum", st.integers(-10, 10)),
                  **optional(draw, "exclusiveMaximum", st.integers(0, 50))}
        if kind == "integer" and draw(st.booleans()):
            schema["multipleOf"] = draw(st.integers(2, 5))
        return schema
    if kind == "enum":
        return {"enum": draw(st.lists(SCALARS, min_size=1, max_size=4, unique_by=repr))}
    if kind == "const":
        return {"const": draw(SCALARS)}
    return {"type": kind}


def composite(children: st.SearchStrategy) -> st.SearchStrategy:
    @st.composite
    def build(draw) -> dict:
        kind = draw(st.sampled_from(["object", "array", "allOf", "anyOf", "oneOf", "not", "if"]))
        if kind == "object":
            props = draw(st.dictionaries(st.sampled_from(NAMES), children, min_size=1, max_size=3))
            schema = {"type": "object", "properties": props,
                      "required": draw(st.lists(st.sampled_from(sorted(props)), unique=True, max_size=2))}
            extra = draw(st.sampled_from(["default", "false", "schema", "count", "names", "patterns"]))
            if extra == "false":
                schema["additionalProperties"] = False
            elif extra == "schema":
                schema["additionalProperties"] = {"type": draw(st.sampled_from(["integer", "string"]))}
            elif extra == "count":
                schema["maxProperties"] = draw(st.integers(1, 3))
            elif extra == "names":
                schema["propertyNames"] = draw(KEY_RULES)
            elif extra == "patterns":
                schema["patternProperties"] = {draw(st.sampled_from(["^x", "e$"])): draw(leaf_schemas())}
            return schema
        if kind == "array":
            schema = {"type": "array", "items": draw(children), **optional(draw, "minItems", st.integers(0, 2)),
                      **optional(draw, "maxItems", st.integers(1, 4))}
            if draw(st.booleans()):
                schema["prefixItems"] = [draw(leaf_schemas())]
            unique = draw(st.integers(0, 5))
            if unique == 0:
                schema = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}
            elif unique == 1:  # why: closed objects with few values, the finite object domain
                schema = {"type": "array", "uniqueItems": True, "items": {
                    "type": "object", "properties": {"x": {"enum": [0, 1]}, "y": {"type": "boolean"}},
                    "required": draw(st.sampled_from([[], ["x"], ["x", "y"]])), "additionalProperties": False}}
            return schema
        if kind in ("allOf", "anyOf", "oneOf"):
            return {kind: draw(st.lists(children, min_size=2, max_size=3))}
        if kind == "not":
            negated = draw(st.sampled_from(["leaf", "additional", "names", "patterns", "required"]))
            if negated == "additional":  # why: key rules complemented into "some key has such a value"
                inner: dict = {"additionalProperties": draw(st.one_of(st.just(False), leaf_schemas()))}
                if draw(st.booleans()):
                    inner["properties"] = {draw(st.sampled_from(NAMES)): draw(leaf_schemas())}
                return {"not": inner}
            if negated == "names":
                return {"not": {"propertyNames": draw(KEY_RULES)}}
            if negated == "patterns":
                return {"not": {"patternProperties": {draw(st.sampled_from(["^x", "e$"])): draw(leaf_schemas())}}}
            if negated == "required":
                return {"not": {"required": draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True))}}
            return {"not": draw(leaf_schemas())}
        return {"if": draw(leaf_schemas()), "then": draw(children), "else": draw(children)}
    return build()


SCHEMAS = st.recursive(leaf_schemas(), composite, max_leaves=6)


def within_digit_limits(value) -> bool:
    """Whether every number in `value` fits the free-digit limits the grammar documents (schema/numbers.py)."""
    if isinstance(value, dict):
        return all(within_digit_limits(v) for v in value.values())
    if isinstance(value, list):
        return all(within_digit_limits(v) for v in value)
    if isinstance(value, float):
        text = repr(value)
        whole, _, frac = text.lstrip("-").partition(".")
        return "e" not in text and len(frac) <= 6 and len(whole) <= 9
    return not isinstance(value, int) or isinstance(value, bool) or abs(value) < 10**15


def refusal_is_named(err: GrammarError) -> bool:
    """An empty schema, a budget (`grammar_too_complex`), or an unsupported keyword named in the message."""
    return ("accepts no JSON value" in err.message or err.code == "grammar_too_complex"
            or (err.code == "unsupported_keyword" and err.message.count("'") >= 2))


@given(data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, derandomize="SPRIG_RANDOM_SCHEMAS" not in os.environ,
          suppress_health_check=list(HealthCheck))
def test_random_schemas_walk_as_jsonschema_decides(compiler, data):
    schema = data.draw(SCHEMAS, label="schema")
    try:
        compiled = compiler.compile(GrammarSpec.json_schema(schema))
    except GrammarError as err:
        assert refusal_is_named(err), (schema, err.code, err.message)
        event("empty schema" if "accepts no JSON value" in err.message else f"refused: {err.code}")
        return
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=format_checker(cls))
    orderer = SchemaOrderer(schema)
    values = data.draw(st.lists(JSON_VALUES, min_size=3, max_size=5), label="values")
    # why: hypothesis-jsonschema 0.23.1 breaks on some object schemas under hypothesis 6.170 ('many' has no
    # 'more') and trips its own canonicalisation assert on some (`required` of a `null` property); those
    # schemas still get the arbitrary values
    with contextlib.suppress(AttributeError, AssertionError, InvalidArgument):
        values += data.draw(st.lists(hypothesis_jsonschema.from_schema(schema), max_size=3), label="valid")
    verdicts = []
    for value in filter(within_digit_limits, values):
        text = orderer.dumps(value)
        verdicts.append(validator.is_valid(value))
        assert walk(compiled, text) == verdicts[-1], (schema, text, verdicts[-1])
    event("compiled, with valid instances" if any(verdicts) else "compiled, only invalid instances")
