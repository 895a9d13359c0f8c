"""Keywords rewritten into ones the evaluator already has: dependencies and numeric formats.

`dependentRequired` (names required with a key), `dependentSchemas` (a schema applied when a key is
present) and draft 7's `dependencies` (either form) become "the key is absent, or the dependent part
holds": `not {required: [key]}` or the dependent schema. The two synthetic subschemas get pointers with a
`~if`/`~then` token, which no real JSON pointer has (`~` is always escaped there), so they never collide.
`multipleOf` constrains integers only (grammar/intsteps.py). `patternProperties` becomes disjoint key regions (one per non-empty set of matching patterns) for the
object shape. OpenAPI's integer formats (`int32`, `int64`, `uint32`, `uint64`) bound integers to their range;
`float`/`double` are annotations (every JSON number a grammar writes is within a double's range).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from sprig.grammar.errors import GrammarError, GrammarErrorCode, invalid_schema, unsupported
from sprig.grammar.schema import intsteps
from sprig.grammar.schema.numbers import NumSet
from sprig.grammar.schema.refs import DEFAULT_BASE, SchemaDocument, child_pointer
from sprig.grammar.schema.values import (
    TOP,
    Bound,
    Expr,
    Node,
    SExpr,
    SPattern,
    ValueSet,
    and_,
    or_,
    s_and,
    s_not,
)
from sprig.grammar.schema.values import Not as NotExpr

DEPENDENCY_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
                   "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}
NUMERIC_FORMATS = frozenset(INTEGER_FORMATS) | {"float", "double"}
MAX_PATTERN_PROPERTIES = 4  # why: 2^n - 1 disjoint key regions


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
            present = synthetic(doc, at + "/~if", {"required": [key]}, pointer)
            if isinstance(dep, list) and keyword != "dependentSchemas":
                if any(not isinstance(name, str) for name in dep):
                    raise invalid_schema("dependent property names must be strings", at)
                then: Expr = synthetic(doc, at + "/~then", {"required": dep}, pointer)
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


def synthetic(doc: SchemaDocument, pointer: str, schema: dict[str, Any], parent: str) -> Node:
    doc.nodes[pointer] = schema
    doc.base_of[pointer] = doc.base_of.get(parent, DEFAULT_BASE)
    return Node(pointer)


def pattern_properties(node: dict[str, Any], pointer: str, path: tuple[str, ...]) -> list[tuple[str, Expr]]:
    """patternProperties as (pattern, its schema bound to the $ref path), patterns checked."""
    value = node.get("patternProperties", {})
    where = child_pointer(pointer, "patternProperties")
    if not isinstance(value, dict):
        raise invalid_schema("patternProperties must be an object", where)
    if len(value) > MAX_PATTERN_PROPERTIES:
        raise unsupported("patternProperties", where, f"more than {MAX_PATTERN_PROPERTIES} patterns")
    for pattern in value:
        check_pattern(pattern, where)
    return [(p, Bound(Node(child_pointer(pointer, "patternProperties", p)), path)) for p in value]


def pattern_regions(found: list[tuple[str, Expr]]) -> tuple[tuple[SExpr, Expr], ...]:
    """Disjoint key languages: one per non-empty set of matching patterns, valued by all their schemas."""
    out = []
    for mask in range(1, 1 << len(found)):
        inside = [i for i in range(len(found)) if mask >> i & 1]
        lang = s_and(*(SPattern(p) if i in inside else s_not(SPattern(p)) for i, (p, _) in enumerate(found)))
        out.append((lang, and_(*(found[i][1] for i in inside))))
    return tuple(out)


def check_pattern(pattern: str, pointer: str) -> None:
    """An ECMA-262 pattern sprig can turn into a language, or the error naming where it is."""
    from sprig.grammar.regex.pattern import PatternSyntaxError, PatternUnsupported
    from sprig.grammar.schema import strings

    try:
        strings.pattern_language(pattern)
    except PatternSyntaxError as exc:
        raise GrammarError(f"invalid regex in patternProperties at '{pointer}': {exc}",
                           GrammarErrorCode.INVALID_REGEX, pointer=pointer) from None
    except PatternUnsupported as exc:
        raise unsupported("patternProperties", pointer, str(exc)) from None


def multiple_of(node: dict[str, Any], pointer: str) -> ValueSet:
    """Multiples of p/q (lowest terms) among the integers are the multiples of p (grammar/intsteps.py)."""
    where = child_pointer(pointer, "multipleOf")
    step = node["multipleOf"]
    if isinstance(step, bool) or not isinstance(step, int | Decimal) or step <= 0:
        raise invalid_schema("multipleOf must be a number greater than 0", where)
    if abs(Decimal(step).adjusted()) > 400:  # why: as_integer_ratio of 1e100000 is a 100,000-digit integer
        raise unsupported("multipleOf", where, "a step beyond 400 digits")
    num, den = Decimal(step).as_integer_ratio()
    if num > intsteps.MAX_MODULUS:
        raise unsupported("multipleOf", where, f"a step over {intsteps.MAX_MODULUS}")
    types = node.get("type")
    if den != 1 and not (types == "integer" or (isinstance(types, list) and "number" not in types)):
        raise unsupported("multipleOf", where, "a fractional step on non-integer numbers")
    ints, steps = intsteps.clean(NumSet.nothing(True), list(intsteps.multiples(num, where)))
    return replace(ValueSet.top(), ints=ints, fracs=NumSet.nothing(False), steps=steps)


TYPE_NAMES = ("null", "boolean", "integer", "number", "string", "array", "object")


def schema_types(value: Any, pointer: str) -> ValueSet:
    """The value set of a `type` keyword."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or any(n not in TYPE_NAMES for n in names):
        raise invalid_schema(f"type must be one of {', '.join(TYPE_NAMES)} or a list of them", pointer)
    top, out = ValueSet.top(), ValueSet.bottom()
    pick = {part: getattr(top if any(n in names for n in types) else out, part) for part, types in (
        ("null", ("null",)), ("bools", ("boolean",)), ("ints", ("integer", "number")), ("fracs", ("number",)),
        ("strings", ("string",)), ("arrays", ("array",)), ("objects", ("object",)))}
    return ValueSet(**pick)


def conditional(node: dict[str, Any], pointer: str) -> Expr:
    """if/then/else as (if and then) or (not if and else)."""
    cond = Node(child_pointer(pointer, "if"))
    then = Node(child_pointer(pointer, "then")) if "then" in node else TOP
    other = Node(child_pointer(pointer, "else")) if "else" in node else TOP
    return or_(and_(cond, then), and_(NotExpr(cond, child_pointer(pointer, "if")), other))
