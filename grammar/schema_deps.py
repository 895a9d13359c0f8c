"""Keywords rewritten into ones the evaluator already has: dependencies and numeric formats.

`dependentRequired` (names required with a key), `dependentSchemas` (a schema applied when a key is
present) and draft 7's `dependencies` (either form) become "the key is absent, or the dependent part
holds": `not {required: [key]}` or the dependent schema. The two synthetic subschemas get pointers with a
`~if`/`~then` token, which no real JSON pointer has (`~` is always escaped there), so they never collide.
OpenAPI's integer formats (`int32`, `int64`, `uint32`, `uint64`) bound integers to their range;
`float`/`double` are annotations (every JSON number a grammar writes is within a double's range).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from sprig.grammar.errors import invalid_schema
from sprig.grammar.numbers import NumSet
from sprig.grammar.schema_refs import DEFAULT_BASE, SchemaDocument, child_pointer
from sprig.grammar.schema_values import Expr, Node, ValueSet, or_
from sprig.grammar.schema_values import Not as NotExpr

DEPENDENCY_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
                   "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}
NUMERIC_FORMATS = frozenset(INTEGER_FORMATS) | {"float", "double"}


def dependency_parts(doc: SchemaDocument, node: dict[str, Any], pointer: str) -> list[Expr]:
    """One "absent or dependent part" expression per key of each dependency keyword in `node`."""
    out: list[Expr] = []
    for keyword in DEPENDENCY_KEYWORDS:
        if keyword not in node:
            continue
        origin = child_pointer(pointer, keyword)
        value = node[keyword]
        if not isinstance(value, dict):
            raise invalid_schema(f"{keyword} must be an object", origin)
        for key, dep in value.items():
            at = child_pointer(origin, key)
            present = _synthetic(doc, at + "/~if", {"required": [key]}, pointer)
            if isinstance(dep, list) and keyword != "dependentSchemas":
                if any(not isinstance(name, str) for name in dep):
                    raise invalid_schema("dependent property names must be strings", at)
                then: Expr = _synthetic(doc, at + "/~then", {"required": dep}, pointer)
            elif isinstance(dep, dict | bool) and keyword != "dependentRequired":
                then = Node(at)
            else:
                raise invalid_schema(f"{keyword} values must be {'arrays' if keyword == 'dependentRequired' else 'schemas'}", at)
            out.append(or_(NotExpr(present, origin), then))
    return out


def integer_format_part(node: dict[str, Any]) -> ValueSet | None:
    """The integer range an OpenAPI integer format allows (other types untouched), or None."""
    fmt = node.get("format")
    bounds = INTEGER_FORMATS.get(fmt) if isinstance(fmt, str) else None
    if bounds is None:
        return None
    lo, hi = (Decimal(b) for b in bounds)
    ints = NumSet.at_least(lo, True, True).intersect(NumSet.at_most(hi, True, True))
    return replace(ValueSet.top(), ints=ints)


def _synthetic(doc: SchemaDocument, pointer: str, schema: dict[str, Any], parent: str) -> Node:
    doc.nodes[pointer] = schema
    doc.base_of[pointer] = doc.base_of.get(parent, DEFAULT_BASE)
    return Node(pointer)
