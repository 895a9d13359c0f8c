"""Keywords issue 15 asks to enforce, beyond the suite: dependencies in every form, numeric formats.

Each is checked against `jsonschema` on hand-picked instances spelled the grammar's way, on the default
(grammar) backend.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from sprig.grammar import GrammarError, GrammarSpec, JsonOptions, matcher_for
from sprig.grammar.schema.ordering import schema_ordered_dumps


def accepts(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def agrees(compiler, schema, instances) -> None:
    """The grammar accepts exactly the instances `jsonschema` finds valid."""
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    validator = jsonschema.validators.validator_for(schema)(schema)
    for value in instances:
        text = schema_ordered_dumps(schema, value)
        assert accepts(compiled, text) == validator.is_valid(value), (schema, text)


CARD = {"type": "object", "properties": {"name": {"type": "string"}, "card": {"type": "integer"},
                                         "billing": {"type": "string"}}}
OBJECTS = [{}, {"name": "a"}, {"card": 1}, {"card": 1, "billing": "x"}, {"billing": "x"},
           {"name": "a", "card": 2, "billing": "y", "extra": True}, {"card": 1, "billing": 5}]


@pytest.mark.parametrize("extra", [
    {"dependentRequired": {"card": ["billing"]}},
    {"dependentSchemas": {"card": {"required": ["billing"], "properties": {"billing": {"maxLength": 3}}}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"card": ["billing"]}},
    {"$schema": "http://json-schema.org/draft-07/schema#",
     "dependencies": {"card": {"required": ["billing"]}, "billing": ["name"]}},
])
def test_dependencies(compiler, extra):
    agrees(compiler, {**CARD, **extra}, OBJECTS + [{"name": "a", "billing": "abcd", "card": 1}])


def test_dependencies_pointers_in_errors(compiler):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema({"dependentRequired": {"a": "b"}}))
    assert err.value.code == "invalid_schema" and err.value.pointer == "/dependentRequired/a"


@pytest.mark.parametrize("fmt,inside,outside", [("int32", [2**31 - 1, -(2**31)], [2**31, -(2**31) - 1]),
                                                ("uint32", [0, 2**32 - 1], [-1, 2**32])])
def test_integer_formats_bound_integers(compiler, fmt, inside, outside):
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "integer", "format": fmt}))
    assert all(accepts(compiled, json.dumps(v)) for v in inside)
    assert not any(accepts(compiled, json.dumps(v)) for v in outside)
    strict = compiler.compile(GrammarSpec.json_schema({"type": "integer", "format": fmt}, JsonOptions(strict=True)))
    assert accepts(strict, str(inside[0]))  # a numeric format is enforced, not refused, under strict


def test_float_formats_are_annotations(compiler):
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "number", "format": "double"}))
    assert accepts(compiled, "1.5") and accepts(compiled, "-2")


def test_draft4_boolean_exclusive_bounds(compiler):
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
              "minimum": 1, "exclusiveMinimum": True, "maximum": 3, "exclusiveMaximum": True}
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    assert accepts(compiled, "2") and accepts(compiled, "1.5")
    assert not accepts(compiled, "1") and not accepts(compiled, "3")


@pytest.mark.parametrize("counts", [{"minProperties": 1}, {"maxProperties": 2}, {"minProperties": 2, "maxProperties": 3},
                                    {"minProperties": 1, "additionalProperties": False},
                                    {"maxProperties": 1, "required": ["name"]}])
def test_min_and_max_properties(compiler, counts):
    agrees(compiler, {**CARD, **counts}, OBJECTS + [{"a": 1, "b": 2, "c": 3, "d": 4}, {"name": "x", "z": None}])


def test_counting_keys_inside_one_of(compiler):
    schema = {"oneOf": [{"type": "object", "maxProperties": 1}, {"type": "object", "required": ["a"]}]}
    agrees(compiler, schema, [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"b": 1, "c": 2}])


def test_the_outlines_backend_refuses_counts_naming_the_keyword(info):
    from sprig.grammar import GrammarCompiler

    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp, \
            pytest.raises(GrammarError) as err:
        comp.compile(GrammarSpec.json_schema({"properties": {"a": {"maxProperties": 2}}}))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/properties/a/maxProperties"


PATTERNED = [{}, {"x-a": 1}, {"x-a": "s"}, {"n1": 2}, {"n1": "s"}, {"x-1": 3}, {"x-1": 3.5}, {"other": None},
             {"id": 4, "x-b": 1, "zz": True}, {"id": "no"}, {"X-a": 1}]


@pytest.mark.parametrize("schema", [
    {"patternProperties": {"^x-": {"type": "integer"}}},
    {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
    {"patternProperties": {"^x-": {"type": "number"}, "[0-9]": {"type": "integer"}},
     "additionalProperties": {"type": "string"}},
    {"properties": {"id": {"type": "integer"}}, "patternProperties": {"^i": {"minimum": 3}},
     "additionalProperties": False},
    {"allOf": [{"patternProperties": {"^x-": {"type": "integer"}}}, {"patternProperties": {"1$": {"maximum": 2}}}]},
])
def test_pattern_properties(compiler, schema):
    agrees(compiler, {"type": "object", **schema}, PATTERNED)


@pytest.mark.parametrize("names", [{"pattern": "^[a-z]+$"}, {"maxLength": 2}, False, {"enum": ["id", "zz"]}])
def test_property_names(compiler, names):
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "propertyNames": names}
    agrees(compiler, schema, PATTERNED + [{"ab": 1}, {"abc": 1}])


ARRAYS = [[], [1], [5], [1, 5], [5, 6, 7], [1, 2, 3], ["x", 5], [5, 5, 1, 5], [7, 1, 1]]


@pytest.mark.parametrize("schema", [
    {"contains": {"minimum": 5}},
    {"items": {"type": "integer"}, "contains": {"minimum": 5}},
    {"contains": {"minimum": 5}, "minContains": 2},
    {"contains": {"minimum": 5}, "maxContains": 1},
    {"contains": {"minimum": 5}, "minContains": 0, "maxContains": 2},
    {"not": {"contains": {"const": 1}}},
    {"anyOf": [{"contains": {"const": 1}}, {"contains": {"const": 5}}]},
])
def test_contains(compiler, schema):
    agrees(compiler, {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", **schema}, ARRAYS)


@pytest.mark.parametrize("schema,pointer", [
    ({"items": {"contains": {"const": 1}, "maxItems": 3}}, "/items/contains"),
    ({"oneOf": [{"contains": {"const": 1}}, {"contains": {"const": 5}}]}, "/oneOf/0/contains"),
])
def test_contains_beyond_one_count_is_refused_by_name(compiler, schema, pointer):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == pointer


INTEGERS = [0, 3, -3, 4, 6, 7, 9, 12, -12, 15, 30, 45, 99, 100, 105, -105, 1.5, 3.0]


@pytest.mark.parametrize("schema", [
    {"type": "integer", "multipleOf": 3},
    {"type": "integer", "multipleOf": 3, "minimum": -10, "maximum": 50},
    {"type": "integer", "multipleOf": 1.5},
    {"allOf": [{"multipleOf": 3}, {"multipleOf": 5}]},
    {"type": "integer", "not": {"multipleOf": 3}},
    {"type": "integer", "oneOf": [{"multipleOf": 3}, {"multipleOf": 5}]},
    {"type": "integer", "anyOf": [{"multipleOf": 7, "maximum": 0}, {"minimum": 40}]},
    {"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"multipleOf": 2}},
])
def test_integer_multiple_of(compiler, schema):
    agrees(compiler, schema, INTEGERS)


def test_fractional_multiple_of_on_numbers_is_refused_by_name(compiler):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema({"type": "number", "multipleOf": 0.01}))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/multipleOf"


def test_generated_multiples_read_back_as_integers(compiler):
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "integer", "multipleOf": 7, "minimum": 1}))
    assert accepts(compiled, "7") and accepts(compiled, "700") and accepts(compiled, "7.0")  # 7.0 is 7 (draft 6+)
    assert not accepts(compiled, "7.5") and not accepts(compiled, "0") and not accepts(compiled, "701") and not accepts(compiled, "-7")


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"name": {"type": "string"}}, "unevaluatedProperties": False},
    {"type": "object", "patternProperties": {"^x-": {}}, "unevaluatedProperties": {"type": "integer"}},
    {"type": "object", "additionalProperties": {"type": "string"}, "unevaluatedProperties": False},
    {"type": "object", "allOf": [{"properties": {"card": {}}}], "unevaluatedProperties": True},
])
def test_unevaluated_properties_without_applicators(compiler, schema):
    agrees(compiler, {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}, OBJECTS + PATTERNED)


@pytest.mark.parametrize("schema", [
    {"prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
    {"prefixItems": [{}], "unevaluatedItems": {"minimum": 5}},
    {"items": {"type": "integer"}, "unevaluatedItems": False},
])
def test_unevaluated_items_without_applicators(compiler, schema):
    agrees(compiler, {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", **schema}, ARRAYS)


@pytest.mark.parametrize("schema", [
    {"anyOf": [{"properties": {"name": {}}}, {"properties": {"card": {}}, "required": ["card"]}],
     "unevaluatedProperties": False},
    {"oneOf": [{"properties": {"name": {"type": "string"}}, "required": ["name"]},
               {"properties": {"card": {}}, "required": ["card"]}], "unevaluatedProperties": {"type": "string"}},
    {"if": {"properties": {"card": {"type": "integer"}}, "required": ["card"]},
     "then": {"properties": {"billing": {}}}, "else": {"properties": {"name": {}}}, "unevaluatedProperties": False},
    {"dependentSchemas": {"card": {"properties": {"billing": {}}}}, "properties": {"card": {}},
     "unevaluatedProperties": False},
])
def test_unevaluated_properties_next_to_conditional_applicators(compiler, schema):
    agrees(compiler, {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", **schema},
           OBJECTS + PATTERNED + [{"name": "a", "card": 1}, {"card": "x", "zz": 1}])


def test_unevaluated_with_conditionals_inside_all_of(compiler):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "allOf": [{"anyOf": [{"properties": {"name": {}}}, {"properties": {"card": {}}, "required": ["card"]}]}],
              "unevaluatedProperties": False}
    agrees(compiler, schema, OBJECTS + [{"name": "a", "card": 1}, {"zz": 1}])


TAG_ARRAYS = [[], ["a"], ["a", "b"], ["b", "a"], ["a", "a"], ["a", "b", "c"], ["c", "b", "a", "b"], [1, 1.0],
              [True, 1], [None, None], ["a", "b", "c", "d"]]


@pytest.mark.parametrize("schema", [
    {"items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
    {"items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2},
    {"items": {"enum": ["a", "b", "c", "d"]}, "uniqueItems": True, "maxItems": 2},
    {"items": {"enum": [1, True, None, "a"]}, "uniqueItems": True},
    {"items": {"type": "integer", "minimum": 0, "maximum": 3}, "uniqueItems": True},
])
def test_unique_items_over_small_domains(compiler, schema):
    agrees(compiler, {"type": "array", **schema}, TAG_ARRAYS + [[0, 1, 2], [3, 3], [0, 1, 2, 3]])


@pytest.mark.parametrize("schema", [
    {"prefixItems": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}], "items": False, "uniqueItems": True},
    {"prefixItems": [{"enum": ["a", "b"]}], "items": {"enum": ["a", "c"]}, "uniqueItems": True, "maxItems": 2},
    {"prefixItems": [{"type": "boolean"}], "items": {"enum": [True, 1]}, "uniqueItems": True},
    {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"enum": ["a", "b"]}],
     "additionalItems": {"enum": ["a", "c"]}, "uniqueItems": True},
])
def test_unique_items_after_a_prefix(compiler, schema):
    agrees(compiler, {"type": "array", **schema}, [[], ["a"], ["b"], ["a", "b"], ["b", "b"], ["a", "c"], ["b", "a"],
                                                   ["a", "c", "b"], ["b", "c", "a"], [True], [True, 1], [True, True],
                                                   [False, 1, True], [False, True], [1]])


@pytest.mark.parametrize("schema", [{"type": "array", "uniqueItems": True},
                                    {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                                    {"not": {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}}])
def test_unique_items_elsewhere_is_refused_by_name(compiler, schema):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema))
    assert err.value.code == "unsupported_keyword" and "uniqueItems" in err.value.message


def test_dynamic_ref_with_one_dynamic_anchor_is_a_ref(compiler):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$dynamicAnchor": "node",
              "type": "object", "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}},
                                               "v": {"type": "integer"}}, "additionalProperties": False}
    agrees(compiler, schema, [{}, {"v": 1}, {"kids": [{"v": 2, "kids": [{}]}]}, {"kids": [{"w": 1}]}, {"v": "x"}])


def test_dynamic_ref_follows_the_dynamic_scope(compiler):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://x.test/root",
              "$dynamicAnchor": "t", "type": "array", "items": {"$ref": "other"},
              "$defs": {"other": {"$id": "other", "$dynamicAnchor": "t", "type": ["array", "string"],
                                  "items": {"$dynamicRef": "#t"}}}}
    agrees(compiler, schema, [[], ["x"], [[]], [["x"]], [[["y"]]], "x", [[1]]])


@pytest.mark.parametrize("schema", [
    {"allOf": [{"properties": {"card": {"type": "integer"}}}], "properties": {"name": {}},
     "unevaluatedProperties": False},
    {"$defs": {"base": {"properties": {"billing": {}}, "patternProperties": {"^x-": {}}}},
     "$ref": "#/$defs/base", "unevaluatedProperties": {"type": "boolean"}},
    {"allOf": [{"additionalProperties": True}], "unevaluatedProperties": False},
])
def test_unevaluated_properties_through_all_of_and_ref(compiler, schema):
    agrees(compiler, {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", **schema},
           OBJECTS + PATTERNED)


def test_unevaluated_items_through_all_of(compiler):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
              "allOf": [{"prefixItems": [{}, {"type": "integer"}]}], "unevaluatedItems": False}
    agrees(compiler, schema, ARRAYS + [["x", 1], ["x", 1, 2]])


@pytest.mark.parametrize("schema,values", [
    ({"type": "string", "format": "email", "maxLength": 12},
     ["a@b.co", "abcdefgh@b.co", "not-an-email", "x@y.z", "q@example.com"]),
    ({"type": "string", "format": "hostname", "minLength": 5, "maxLength": 9},
     ["abc", "abcde", "ab.cd", "a-b.c.d", "abcdefghij", "-ab.cd"]),
    ({"type": "string", "pattern": "^a", "maxLength": 4, "format": "uri"}, ["a:b", "a:bcd", "b:cd", "a:b/c/"]),
])
def test_formats_with_lengths_compile_and_are_exact(compiler, schema, values):
    from jsonschema import Draft202012Validator

    checker = Draft202012Validator.FORMAT_CHECKER
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    validator = Draft202012Validator(schema, format_checker=checker)
    for value in values:
        assert accepts(compiled, json.dumps(value)) == validator.is_valid(value), value


def test_an_empty_format_and_length_intersection_accepts_nothing(compiler):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema({"type": "string", "format": "uuid", "maxLength": 5}))
    assert "accepts no JSON value" in err.value.message
    compiled = compiler.compile(GrammarSpec.json_schema(
        {"type": "array", "items": {"type": "string", "format": "uuid", "maxLength": 5}}))
    assert accepts(compiled, "[]") and not accepts(compiled, '["a"]')


@pytest.mark.parametrize("additional", [True, {"type": "integer"}])
def test_undeclared_keys_take_additional_properties_and_declared_keys_only_their_own(compiler, additional):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "boolean"}},
              "additionalProperties": additional}
    keys = ["name", "n", "", "nam", "names", "na\"me", "nàme", "name\n", "\u0001", "N"]
    agrees(compiler, schema, [{k: v} for k in keys for v in ("x", 1, True)] + [{"name": "a", "nam": 2}])


def test_multiple_of_a_power_of_ten_stays_small(compiler):
    """A step of 100 only depends on the last two digits: the minimized automaton, not 100 remainders per
    state of the range (that grammar was 200,000 characters and took seconds)."""
    schema = {"type": "integer", "minimum": 100, "multipleOf": 100}
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    assert len(compiled.lark) < 5_000
    agrees(compiler, schema, [0, 99, 100, 150, 200, 1000, 1050, 10**12, -100, -200])
