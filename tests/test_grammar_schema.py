"""JSON Schema → grammar, feature by feature (beyond the official suite).

`accepts` walks the text through the compiled automaton with the model's own tokenization and then
requires EOS to be allowed; `jsonschema` is the oracle where the text is generated at random.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

import jsonschema
import pytest

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, Whitespace, matcher_for
from sprig.grammar.schema.ordering import schema_ordered_dumps


@pytest.fixture(scope="module")
def outlines_compiler(info):
    """The eager regex backend, for the options only it has (recursion and nesting bounds)."""
    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp:
        yield comp


def grammar(compiler, schema, **options):
    return compiler.compile(GrammarSpec.json_schema(schema, JsonOptions(**options)))


def accepts(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def test_properties_in_declared_order_optional_ones_omittable(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {"type": "boolean"}}, "required": ["b"],
              "additionalProperties": False}
    g = grammar(compiler, schema)
    for text in ('{"b":"x"}', '{"a":1,"b":"x"}', '{"b":"x","c":true}', '{"a":1,"b":"x","c":false}'):
        assert accepts(g, text), text
    for text in ('{}', '{"a":1}', '{"b":"x","a":1}', '{"b":"x",}', '{,"b":"x"}', '{"b":"x","d":1}'):
        assert not accepts(g, text), text


def test_additional_properties_schema_and_default(compiler):
    g = grammar(compiler, {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}})
    assert accepts(g, '{"a":1,"z":"s","y":"t"}') and not accepts(g, '{"z":1}') and not accepts(g, '{"a":"s"}')
    free = grammar(compiler, {"type": "object", "properties": {"a": {"type": "integer"}}})
    assert accepts(free, '{"a":1,"z":[1,2]}')  # JSON Schema's default: other keys allowed
    strict = grammar(compiler, {"type": "object", "properties": {"a": {"type": "integer"}}},
                     allow_extra_properties=False)
    assert accepts(strict, '{"a":1}') and not accepts(strict, '{"a":1,"z":2}')


def test_whitespace_policies(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a"], "additionalProperties": False}
    compact, spaced = grammar(compiler, schema), grammar(compiler, schema, whitespace=Whitespace.SPACED)
    flexible = grammar(compiler, schema, whitespace=Whitespace.FLEXIBLE)
    assert accepts(compact, '{"a":[1,2]}') and not accepts(compact, '{"a": [1, 2]}')
    assert accepts(spaced, '{"a": [1, 2]}') and not accepts(spaced, '{"a":[1,2]}')
    for text in ('{"a":[1,2]}', '{ "a" : [ 1 ,2 ] }', '{\n "a": [1, 2]\n}'):
        assert accepts(flexible, text), text
    assert not accepts(flexible, '{"a":[1,   2]}')  # at most max_whitespace (2) characters per gap


def test_integer_and_number_bounds_are_exact(compiler):
    rng = random.Random(7)
    cases = [({"type": "integer", "minimum": -15, "exclusiveMaximum": 120}, True),
             ({"type": "number", "exclusiveMinimum": 0.25, "maximum": 3.5}, False),
             ({"type": "number", "minimum": -2.75, "maximum": -0.5}, False)]
    for schema, integral in cases:
        g = grammar(compiler, schema)
        for _ in range(150):
            value = rng.randint(-30, 130) if integral else round(rng.uniform(-4, 5), rng.randint(0, 3))
            text = json.dumps(value)  # why: 1.0 is the integer 1 (drafts 6+), accepted where 1 is
            ok = True
            try:
                jsonschema.validate(json.loads(text, parse_float=Decimal), schema)
            except jsonschema.ValidationError:
                ok = False
            assert accepts(g, text) == ok, (schema, text)


def test_enum_and_const_compare_by_value(compiler):
    g = grammar(compiler, {"enum": [1, "a\"b", None, {"k": [True]}]})
    for text in ('1', '"a\\"b"', 'null', '{"k":[true]}'):
        assert accepts(g, text), text
    assert accepts(g, '1.0') and accepts(g, '1e0')  # why: 1.0 is 1 (drafts 6+)
    for text in ('true', '"a"', '{"k":[false]}', '2'):
        assert not accepts(g, text), text


def test_pattern_is_a_search_and_combines_with_lengths(compiler):
    g = grammar(compiler, {"type": "string", "pattern": "ab+", "maxLength": 5})
    assert accepts(g, '"xabbx"') and accepts(g, '"ab"')
    assert not accepts(g, '"xxabbx"') and not accepts(g, '"xbx"')
    anchored = grammar(compiler, {"type": "string", "pattern": "^[A-Z]+$", "minLength": 2, "maxLength": 3})
    assert accepts(anchored, '"AB"') and not accepts(anchored, '"A"') and not accepts(anchored, '"ABCD"')


def test_string_escapes_are_spelled_like_json_dumps(compiler):
    g = grammar(compiler, {"type": "string", "maxLength": 3})
    for value in ('a"b', "\\\n", "\x01", "é\t"):
        assert accepts(g, json.dumps(value, ensure_ascii=False)), repr(value)
    assert not accepts(g, '"\\u0061"')  # a valid JSON spelling, but not the canonical one


def test_formats(compiler):
    g = grammar(compiler, {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                                            "id": {"type": "string", "format": "uuid"}},
                           "required": ["when", "id"], "additionalProperties": False})
    assert accepts(g, '{"when":"2024-02-29T12:00:00Z","id":"2eb8aa08-aa98-11ea-b4aa-73b441d16380"}')
    assert not accepts(g, '{"when":"2023-02-29T12:00:00Z","id":"2eb8aa08-aa98-11ea-b4aa-73b441d16380"}')


def test_recursion_depth_is_an_option_of_the_regex_backend(compiler, outlines_compiler):
    tree = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                               "required": ["v"], "additionalProperties": False}},
            "$ref": "#/$defs/node"}
    deep = '{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"v":4}]}]}]}'
    assert not accepts(grammar(outlines_compiler, tree, max_recursion_depth=3), deep)
    assert accepts(grammar(outlines_compiler, tree, max_recursion_depth=4), deep)
    deeper = '{"v":0,"kids":[' * 40 + '{"v":1}' + ']}' * 40  # the grammar backend recurses for real
    assert accepts(grammar(compiler, tree), deeper) and not accepts(grammar(compiler, tree), deeper[:-1])


def test_one_of_discriminated_union(compiler):
    schema = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
         "required": ["kind", "lives"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind"], "additionalProperties": False}]}
    g = grammar(compiler, schema)
    assert accepts(g, '{"kind":"cat","lives":9}') and accepts(g, '{"kind":"dog"}')
    assert not accepts(g, '{"kind":"dog","lives":9}') and not accepts(g, '{"kind":"cow"}')


def test_one_of_overlap_is_exact(compiler):
    g = grammar(compiler, {"type": "string", "oneOf": [{"maxLength": 3}, {"pattern": "^a"}]})
    assert accepts(g, '"bcd"') and accepts(g, '"abcd"') and not accepts(g, '"ab"') and not accepts(g, '"bcde"')


def test_schema_ordered_dumps_follows_the_grammar(compiler):
    schema = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}
    value = {"a": "x", "extra": [1], "z": 3}
    text = schema_ordered_dumps(schema, value)
    assert text == '{"z":3,"a":"x","extra":[1]}' and accepts(grammar(compiler, schema), text)


def test_errors_name_the_keyword_and_pointer(compiler):
    with pytest.raises(GrammarError) as err:
        grammar(compiler, {"properties": {"a": {"type": "array", "uniqueItems": True}}})
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/properties/a/uniqueItems"
    assert err.value.param == "json_schema" and "uniqueItems" in err.value.message


def test_strict_false_ignores_unknown_keywords_only(compiler):
    schema = {"type": "integer", "x-ui-widget": "slider", "title": "n", "examples": [1]}
    with pytest.raises(GrammarError):
        grammar(compiler, schema, strict=True)
    assert accepts(grammar(compiler, schema), "5")  # strict=False is the default: JSON Schema's own rule
    with pytest.raises(GrammarError):  # an assertion sprig cannot enforce is refused either way
        grammar(compiler, {"type": "array", "uniqueItems": True}, strict=False)
