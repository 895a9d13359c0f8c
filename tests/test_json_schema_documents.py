"""A `$ref` to another document: the caller's documents (`JsonOptions.documents`), the official meta-schemas.

Checked against `jsonschema` (with the same documents in a `referencing` registry) on instances spelled the
grammar's way, on the default (grammar) backend and, where it compiles, on outlines.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, matcher_for
from sprig.grammar.schema.ordering import SchemaOrderer

DEFS_URI = "https://example.com/schemas/defs.json"
DEFS = {"$defs": {"id": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
                  "tag": {"enum": ["red", "green"]}, "owner": {"$ref": "people.json"}}}
PEOPLE = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}, "required": ["name"],
          "additionalProperties": False}
DOCUMENTS = ((DEFS_URI, json.dumps(DEFS)), ("https://example.com/schemas/people.json", json.dumps(PEOPLE)))
ROOT = {"type": "object", "required": ["id"], "additionalProperties": False,
        "properties": {"id": {"$ref": f"{DEFS_URI}#/$defs/id"}, "tags": {"$ref": f"{DEFS_URI}#/$defs/tags"},
                       "owner": {"$ref": "defs.json#/$defs/owner"}},
        "$id": "https://example.com/schemas/root.json"}
INSTANCES = [{"id": 1}, {"id": 0}, {"id": 3, "tags": ["red", "green"]}, {"id": 3, "tags": ["blue"]},
             {"id": 2, "owner": {"name": "ada"}}, {"id": 2, "owner": {"name": "adaline"}}, {"id": 2, "owner": {}},
             {"tags": []}, {"id": 1.5}]


def walks(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


@pytest.mark.parametrize("backend", ["llguidance", "outlines"])
def test_a_schema_over_several_documents_agrees_with_jsonschema(info, backend):
    options = JsonOptions(documents=DOCUMENTS)
    registry = Registry().with_resources(
        [(uri, Resource.from_contents(json.loads(text), default_specification=DRAFT202012)) for uri, text in DOCUMENTS])
    validator = jsonschema.Draft202012Validator(ROOT, registry=registry)
    orderer = SchemaOrderer(ROOT, options)
    with GrammarCompiler(info, max_workers=1, isolate=False, backend=backend) as compiler:
        compiled = compiler.compile(GrammarSpec.json_schema(ROOT, options))
        verdicts = [walks(compiled, orderer.dumps(value)) for value in INSTANCES]
    assert verdicts == [validator.is_valid(value) for value in INSTANCES]
    assert True in verdicts and False in verdicts


def test_documents_are_part_of_the_cache_key():
    one, other = JsonOptions(documents=DOCUMENTS), JsonOptions(documents=DOCUMENTS[:1])
    assert GrammarSpec.json_schema(ROOT, one).canonical_key() != GrammarSpec.json_schema(ROOT, other).canonical_key()


def test_a_document_nobody_gave_is_refused_naming_the_ref(compiler):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(ROOT, JsonOptions(documents=DOCUMENTS[:1])))
    assert err.value.code == "unsupported_keyword" and "people.json" in err.value.message
    assert err.value.pointer == "@0/$defs/owner/$ref"  # why: inside the first other document loaded


def test_a_document_of_another_draft_is_refused(compiler):
    draft7 = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"})
    options = JsonOptions(documents=(("https://example.com/int.json", draft7),))
    with pytest.raises(GrammarError, match="another draft") as err:
        compiler.compile(GrammarSpec.json_schema({"$ref": "https://example.com/int.json"}, options))
    assert err.value.code == "unsupported_keyword" and err.value.pointer == "/$ref"


def test_official_meta_schemas_resolve_without_documents(compiler):
    schema = {"$ref": "https://json-schema.org/draft/2020-12/meta/meta-data"}
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    assert walks(compiled, '{"title":"x","readOnly":true}')
    assert not walks(compiled, '{"readOnly":"yes"}')


@pytest.mark.parametrize("documents", [(("relative.json", "{}"),), (("https://example.com/a.json#frag", "{}"),),
                                       (("https://example.com/a.json", {}),), ("https://example.com/a.json",)])
def test_bad_documents_name_the_field(documents):
    with pytest.raises(ValueError, match="documents"):
        JsonOptions(documents=documents)
