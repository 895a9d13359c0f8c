"""`not` over object shapes (issue 33): key rules complemented exactly into "some key has such a value".

`not: {additionalProperties: S}` holds when some undeclared key's value fails S, `not: {propertyNames: N}` when
some key is outside N, `not: {patternProperties: ...}` when some key of a pattern fails its schema; these meet
the other keywords (declared properties, required, counts, oneOf branches) by the shape algebra and become
a grammar whose other-keys run must contain one such witness. Every case is checked against `jsonschema`
on instances spelled the grammar's way, valid and invalid alike.
"""

from __future__ import annotations

import jsonschema
import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarError, GrammarSpec, JsonOptions, Whitespace
from sprig.grammar.schema.ordering import schema_ordered_dumps

OBJECTS = [{}, {"a": 1}, {"a": "x"}, {"a": ""}, {"b": 1}, {"b": "x"}, {"x-a": 1}, {"x-a": "s"}, {"id": 3},
           {"id": "s"}, {"id": 3, "zz": 1}, {"id": 3, "zz": ""}, {"ab": 1, "cd": "e"}, {"abc": 1},
           {"a": 1, "b": 2, "c": 3}, {"x-1": None, "id": 1}, {"q": "", "r": ""}, {"q": "", "r": "z"},
           [], "s", 3, None]


def agrees(compiler, schema, instances=OBJECTS) -> None:
    """The grammar accepts exactly the instances `jsonschema` finds valid, and some of each kind exist."""
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    validator = jsonschema.validators.validator_for(schema)(schema)
    verdicts = {True: 0, False: 0}
    for value in instances:
        text = schema_ordered_dumps(schema, value)
        expected = validator.is_valid(value)
        assert walk(compiled, text) == expected, (schema, text, expected)
        verdicts[expected] += 1
    assert verdicts[True] and verdicts[False], verdicts  # why: a test that could not fail on either side


STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}


@pytest.mark.parametrize("schema", [
    {"not": {"additionalProperties": False}},
    {"type": "object", "not": {"additionalProperties": {"type": "integer"}}},
    {"properties": {"id": {"type": "integer"}}, "not": {"additionalProperties": False}},
    {"type": "object", "properties": {"id": {"type": "integer"}}, "not": {"additionalProperties": {"type": "string"}}},
    {**STRINGS, "not": {"additionalProperties": {"type": "string", "maxLength": 0}}},
    {"type": "object", "not": {"properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "integer"}}},
    {"type": "object", "not": {"patternProperties": {"^x-": {"type": "integer"}}}},
    {"type": "object", "not": {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}},
    {"type": "object", "not": {"propertyNames": {"maxLength": 2}}},
    {"type": "object", "not": {"propertyNames": {"enum": ["a", "b", "id"]}}},
    {"type": "object", "properties": {"id": {}}, "not": {"propertyNames": {"pattern": "^[a-z]+$"}}},
    {"type": "object", "not": {"required": ["a"], "additionalProperties": False}},
    {"type": "object", "not": {"not": {"additionalProperties": {"type": "integer"}}}},
    {"type": "object", "maxProperties": 1, "properties": {"a": {}, "b": {}}, "additionalProperties": False,
     "not": {"propertyNames": {"enum": ["a"]}}},
])
def test_not_over_key_rules_is_exact(compiler, schema):
    agrees(compiler, schema)


@pytest.mark.parametrize("schema", [
    {"anyOf": [{"required": ["a"]}, {"not": {"additionalProperties": {"type": "integer"}}}]},
    {"allOf": [{"$ref": "#/$defs/open"}, {"not": {"$ref": "#/$defs/ints"}}],
     "$defs": {"open": {"type": "object"}, "ints": {"additionalProperties": {"type": "integer"}}}},
    {"oneOf": [{"additionalProperties": {"type": "integer"}}, {"propertyNames": {"maxLength": 1}}]},
    {"oneOf": [{"type": "object", "required": ["id"]}, {"type": "object", "additionalProperties": {"type": "string"}}]},
    {"if": {"propertyNames": {"maxLength": 2}}, "then": {"required": ["a"]}, "else": {"required": ["b"]}},
])
def test_complemented_key_rules_inside_applicators(compiler, schema):
    agrees(compiler, schema)




@pytest.mark.parametrize("schema, pointer", [
    ({"type": "object", "maxProperties": 2, "not": {"propertyNames": {"enum": ["a", "b"]}}}, "/not"),
    ({"allOf": [{"not": {"additionalProperties": {"type": "integer"}}}, {"not": {"propertyNames": {"maxLength": 2}}}]},
     "/allOf/0/not"),
    ({"if": {"propertyNames": {"maxLength": 2}}, "then": {"required": ["a"]}, "else": {"maxProperties": 1}}, "/if"),
])
def test_what_stays_refused_names_its_keyword_and_pointer(compiler, schema, pointer):
    """Two witnesses among the undeclared keys, or one beside a key count: refused, by keyword and pointer."""
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema))
    keyword = pointer.rsplit("/", 1)[-1]
    assert err.value.code == "unsupported_keyword" and f"'{keyword}'" in err.value.message
    assert err.value.pointer in (pointer, pointer.replace("/0/", "/1/"))


def test_the_outlines_backend_refuses_a_witness_by_name(info):
    from sprig.grammar import GrammarCompiler

    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp, \
            pytest.raises(GrammarError) as err:
        comp.compile(GrammarSpec.json_schema({"type": "object", "not": {"additionalProperties": False}}))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/not"


def test_spaced_output_keeps_the_witness(compiler):
    schema = {**STRINGS, "not": {"additionalProperties": {"type": "string", "maxLength": 0}}}
    compiled = compiler.compile(GrammarSpec.json_schema(schema, JsonOptions(whitespace=Whitespace.SPACED)))
    assert walk(compiled, '{"a": "", "b": "x"}') and walk(compiled, '{"b": "x", "a": ""}')
    assert not walk(compiled, '{"a": "", "b": ""}') and not walk(compiled, '{}')


POINTS = {"type": "object", "properties": {"x": {"enum": [0, 1]}, "y": {"enum": [0, 1]}}, "required": ["x"],
          "additionalProperties": False}
POINT_ARRAYS = [[], [{"x": 0}], [{"x": 0}, {"x": 0}], [{"x": 0}, {"x": 0, "y": 0}], [{"x": 1, "y": 1}, {"x": 1, "y": 1}],
                [{"x": 0}, {"x": 1}, {"x": 0, "y": 1}, {"x": 1, "y": 0}], [{"x": 2}], [{"y": 0}], [{"x": 0, "z": 1}],
                [{"x": 0}, {"x": 1}, {"x": 0, "y": 0}, {"x": 0, "y": 1}, {"x": 1, "y": 0}, {"x": 1, "y": 1}],
                [{"x": 0}, {"x": 1}, {"x": 0, "y": 0}, {"x": 0, "y": 1}, {"x": 1, "y": 0}, {"x": 1, "y": 1}, {"x": 0}],
                [{"kind": "a"}, {"kind": "b"}], [{"kind": "a"}, {"kind": "a"}], [{"kind": "b", "on": True}, {"kind": "b"}]]


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": POINTS, "uniqueItems": True},
    {"type": "array", "items": POINTS, "uniqueItems": True, "minItems": 2, "maxItems": 3},
    {"type": "array", "uniqueItems": True, "items": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "on": {"type": "boolean"}}, "required": ["kind"],
         "additionalProperties": False}]}},
    {"type": "array", "uniqueItems": True, "items": {"anyOf": [POINTS, {"enum": [{"x": 0}, {"x": 1, "y": 1}]}]}},
])
def test_unique_items_over_finite_objects(compiler, schema):
    agrees(compiler, schema, POINT_ARRAYS)


def test_unique_items_over_open_objects_stays_refused_by_name(compiler):
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "object", "properties": {"x": {"enum": [0, 1]}}}}
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/uniqueItems"


FILTER = {"$defs": {"f": {"oneOf": [
    {"type": "object", "properties": {"and": {"type": "array", "items": {"$ref": "#/$defs/f"}, "minItems": 2}},
     "required": ["and"], "additionalProperties": False},
    {"type": "object", "properties": {"not": {"$ref": "#/$defs/f"}}, "required": ["not"], "additionalProperties": False},
    {"type": "object", "properties": {"field": {"type": "string"}, "eq": {"type": "integer"}},
     "required": ["field", "eq"], "additionalProperties": False}]}}, "$ref": "#/$defs/f"}


def test_one_of_over_closed_recursive_shapes(compiler):
    """Branches closed by `additionalProperties: false` are disjoint by their keys without evaluating the
    recursive values (it was refused: the overlap test unfolded the $ref)."""
    leaf = {"field": "a", "eq": 1}
    agrees(compiler, FILTER, [leaf, {"not": leaf}, {"and": [leaf, {"not": {"not": leaf}}]}, {"and": [leaf]},
                              {"not": {"field": "a"}}, {"and": [leaf, leaf], "not": leaf}, {"field": "a", "eq": 1.5}, {}])


@pytest.mark.parametrize("extra", [{}, {"maxProperties": 3}])
def test_pattern_keys_count_for_min_properties_when_additional_is_false(compiler, extra):
    schema = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False,
              "minProperties": 2, **extra}
    agrees(compiler, schema, [{}, {"xa": 1}, {"xa": 1, "xb": 2}, {"xa": 1, "b": 2}, {"xa": 1, "xb": 2, "xc": 3, "xd": 4}])
