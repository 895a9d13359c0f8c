"""The failures issue 15 reported on real-world schemas, one test each, on both backends where they apply.

Integers came out as `73.0`; values a schema leaves unconstrained could not nest past `any_value_depth`;
vendor and draft-4 keywords (`id`, `x-*`, `example`, `name`, `links`, `readonly`, ...) were refused
although JSON Schema says to ignore them. Walks use the tiny model's own tokenization.
"""

from __future__ import annotations

import json

import pytest
import torch

from sprig.grammar import GrammarError, GrammarSpec, JsonOptions, matcher_for
from sprig.grammar.matcher import allocate_token_bitmask


def accepts(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def allowed_after(compiled, text: str) -> list[bytes]:
    matcher = matcher_for(compiled)
    for tok in compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids:
        assert matcher.accept_token(tok)
    info = compiled.tokenizer_info
    mask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_bitmask(mask, 0)
    bits = torch.tensor([(int(w) >> j) & 1 for w in mask[0].tolist() for j in range(32)])[: info.vocab_size]
    return [info.token_bytes[t] or b"<eos>" for t in bits.nonzero().flatten().tolist()]


@pytest.mark.parametrize("schema", [{"type": "integer"}, {"type": "integer", "minimum": 0, "maximum": 100},
                                    {"type": ["integer", "string"]}, {"enum": [73, 1.5]}])
def test_integers_are_integer_literals(any_backend, schema):
    """The outlines backend and draft 4 spell integers only as literals; drafts 6+ on the grammar backend
    accept every spelling of the value (issue 33: `73.0` is the integer 73 there)."""
    compiled = any_backend.compile(GrammarSpec.json_schema(schema))
    assert accepts(compiled, "73")
    if any_backend.backend.value == "llguidance":
        assert accepts(compiled, "73.0") and accepts(compiled, "73.00") and accepts(compiled, "7.3e1")
        compiled = any_backend.compile(GrammarSpec.json_schema(
            {"$schema": "http://json-schema.org/draft-04/schema#", **schema}))
    assert not accepts(compiled, "73.0") and not accepts(compiled, "73.00")
    after = allowed_after(compiled, "73")
    assert after and not any(raw.startswith(b".") for raw in after), after  # the model is never offered "."
    assert json.loads("73") == 73 and isinstance(json.loads("73"), int)


def test_a_number_may_still_have_a_fraction(any_backend):
    compiled = any_backend.compile(GrammarSpec.json_schema({"type": "number", "maximum": 10}))
    assert accepts(compiled, "7") and accepts(compiled, "7.25")
    assert accepts(compiled, "7.0") == (any_backend.backend.value == "llguidance")  # the same value as 7


DEEP_VALUES = ['[[[[[[[[[[1]]]]]]]]]]', '{"a":{"b":{"c":{"d":{"e":{"f":[{"g":[null,true,"x"]}]}}}}}}',
               '[{"k":[{"k":[{"k":[{"k":[]}]}]}]}]', '{}', '"s"', '-1.5e3']


@pytest.mark.parametrize("schema,template", [
    ({}, "@"), (True, "@"), ({"type": "array"}, "[@]"),
    ({"type": "object", "properties": {"a": {}}, "required": ["a"]}, '{"a":@}'),
    ({"type": "object", "properties": {"id": {"type": "integer"}}}, '{"id":1,"extra":@}'),
])
def test_unconstrained_values_nest_to_any_depth(compiler, schema, template):
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    for value in DEEP_VALUES + ["[" * 500 + "]" * 500]:
        assert accepts(compiled, template.replace("@", value)), value[:40]
    for broken in ("[[1]", '{"a":}', "[1,]"):
        assert not accepts(compiled, template.replace("@", broken)), broken


VENDOR = {"$schema": "http://json-schema.org/draft-04/schema#", "id": "http://example.com/thing.json",
          "name": "Thing", "version": "1.2", "self": {"href": "/things"}, "links": [{"rel": "self"}],
          "x-kubernetes-preserve-unknown-fields": True, "esriDocumentation": {"url": "x"},
          "type": "object", "properties": {
              "size": {"type": "integer", "example": 3, "readonly": True, "_format": "int",
                       "minimum": 0, "exclusiveMinimum": True},
              "tags": {"type": "array", "items": {"type": "string", "x-order": 1}, "_uniqueItems": True},
              "when": {"type": "string", "format": "x-vendor-timestamp"}},
          "required": ["size"], "additionalProperties": False}


def test_unknown_keywords_are_annotations_by_default(compiler):
    compiled = compiler.compile(GrammarSpec.json_schema(VENDOR))
    assert accepts(compiled, '{"size":1,"tags":["a"],"when":"any text"}')
    assert not accepts(compiled, '{"size":0}')  # draft-4 boolean exclusiveMinimum is enforced
    assert not accepts(compiled, '{"size":1,"other":1}') and not accepts(compiled, '{"tags":[]}')


BASE = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {
    "size": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}


@pytest.mark.parametrize("keyword,where", [
    ("id", ""), ("name", ""), ("version", ""), ("self", ""), ("links", ""),
    ("x-kubernetes-preserve-unknown-fields", ""), ("esriDocumentation", ""), ("example", "/properties/size"),
    ("readonly", "/properties/size"), ("_format", "/properties/size"), ("_uniqueItems", "/properties/tags"),
    ("x-order", "/properties/tags/items")])
def test_strict_still_refuses_each_unknown_keyword(compiler, keyword, where):
    schema = json.loads(json.dumps(BASE))
    node = schema
    for part in where.strip("/").split("/") if where else []:
        node = node[part]
    node[keyword] = json.loads(json.dumps(_find(VENDOR, keyword)))
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema, JsonOptions(strict=True)))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == f"{where}/{keyword}"
    assert f"'{keyword}'" in err.value.message
    assert accepts(compiler.compile(GrammarSpec.json_schema(schema)), '{"size":1,"tags":["x"]}')


def _find(node: object, keyword: str) -> object:
    """The value `keyword` has somewhere in `node` (VENDOR holds each vendor keyword once)."""
    if isinstance(node, dict):
        if keyword in node:
            return node[keyword]
        for value in node.values():
            found = _find(value, keyword)
            if found is not None:
                return found
    return None


def test_strict_refuses_an_unknown_format_the_default_ignores(compiler):
    schema = {"type": "string", "format": "x-vendor-timestamp"}
    assert accepts(compiler.compile(GrammarSpec.json_schema(schema)), '"whatever"')
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema, JsonOptions(strict=True)))
    assert err.value.pointer == "/format"
