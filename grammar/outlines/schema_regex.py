"""JSON Schema → regex: parse, index, evaluate, emit, check the size.

    node = schema_to_regex_tree('{"type": "object", "properties": {"a": {"type": "integer"}}}', JsonOptions())
    node.render()  # the Rust-syntax regex outlines-core compiles (the outlines backend's JSON Schema path)

Supported (exactly): type (incl. lists and null), enum, const, properties, required, additionalProperties
(false, true or a schema), prefixItems, items (also the draft-07 array form with additionalItems), minItems,
maxItems, minLength, maxLength, pattern (ECMA-262, search semantics), format (date-time, date, time, email,
uuid, uri, ipv4, ipv6, hostname), minimum, maximum, exclusiveMinimum, exclusiveMaximum, allOf, anyOf, oneOf,
not and if/then/else (where the complement is expressible), $ref/$defs/definitions/$id/$anchor within the
document, with recursion up to `max_recursion_depth`. Annotations are accepted. Everything else is refused
with an error naming the keyword and its JSON pointer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sprig.grammar.errors import invalid_schema, too_complex
from sprig.grammar.outlines.schema_emit import Emitter
from sprig.grammar.regex import ir
from sprig.grammar.regex.constraints import MAX_WEIGHT
from sprig.grammar.schema.evaluator import Evaluator
from sprig.grammar.schema.load import load_schema
from sprig.grammar.schema.refs import SchemaDocument, check_schema_shape
from sprig.grammar.schema.values import Node, ObjShape, ValueSet
from sprig.grammar.spec import JsonOptions


def schema_to_regex_tree(schema: str | dict[str, Any] | bool, options: JsonOptions) -> ir.Node:
    """The regex tree of the JSON texts that are valid instances of `schema` (in sprig's spelling)."""
    root = load_schema(schema)
    check_schema_shape(root, "")
    doc = SchemaDocument.index(root, dict(options.documents))
    emitter = Emitter(Evaluator(doc, options), options)
    try:
        node = emitter.expr(Node(""), (), 0)
    except RecursionError:
        raise too_complex("schema nested too deeply") from None
    if ir.is_never(node):
        raise invalid_schema("the schema accepts no JSON value (within the recursion depth)", "")
    return _checked(node)


def json_object_regex_tree(options: JsonOptions) -> ir.Node:
    """Any JSON object (what response_format {"type": "json_object"} asks for)."""
    emitter = Emitter(Evaluator(SchemaDocument.index(True), options), options)
    return _checked(emitter.value_set(replace(ValueSet.bottom(), objects=(ObjShape(),)), (), 0))


def _checked(node: ir.Node) -> ir.Node:
    if node.weight > MAX_WEIGHT:
        raise too_complex(f"about {node.weight} character positions (limit {MAX_WEIGHT})")
    return node

