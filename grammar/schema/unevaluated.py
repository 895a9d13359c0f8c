"""`unevaluatedProperties` / `unevaluatedItems` as static constraints.

A property (item) is evaluated when an adjacent keyword or an in-place subschema that *passes* evaluates
it. `allOf` and `$ref` subschemas always pass on a valid instance, so what they evaluate is collected
statically (`_evaluated`: property names, patterns, prefix length, or "everything"). `anyOf`, `oneOf`,
`if`/`then`/`else` and `dependentSchemas` at the same schema evaluate only when they pass, so the keyword
becomes a disjunction over their outcomes, each outcome "these branches pass, and the unevaluated schema
holds outside what they and the static part evaluate":

* `anyOf`: one disjunct per non-empty set T of branches, "every branch in T passes"; a larger passing set
  only weakens the constraint, so no negations are needed (anyOf itself requires a branch);
* `oneOf`: "branch i passes" (oneOf itself makes it the only one);
* `if`: "if and then pass" or "if fails and else passes" (the complement of `if`);
* `dependentSchemas`: per key, "the key is present" with its schema's names, or nothing added.

The same holds at any depth of in-place subschemas (an anyOf inside an allOf branch, a oneOf behind a
$ref): outcomes multiply, up to 64.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from sprig.grammar.errors import unsupported
from sprig.grammar.schema.refs import SchemaDocument, child_pointer
from sprig.grammar.schema.values import (
    TOP,
    ArrShape,
    Bound,
    Expr,
    Fixed,
    Node,
    ObjShape,
    ValueSet,
    and_,
    or_,
)
from sprig.grammar.schema.values import Not as NotExpr

MAX_OUTCOMES = 64  # why: anyOf subsets x if/else x dependent keys multiply
Found = tuple[frozenset[str], frozenset[str], int] | None  # (names, patterns, prefix); None = everything


@dataclass(frozen=True)
class Unevaluated:
    """What the unevaluated* keywords of one schema become: which keyword values undeclared properties /
    later items, the names, patterns and prefix that must-succeed subschemas evaluate, and (next to
    conditional applicators) expressions to intersect instead."""

    props_key: str = "additionalProperties"
    items_key: str | None = None  # None: the usual rule (items, or additionalItems after array-form items)
    keys: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    prefix: int = 0
    extra: tuple[Expr, ...] = ()


def unevaluated_keys(doc: SchemaDocument, node: dict[str, Any], pointer: str, path: tuple[str, ...]) -> Unevaluated:
    """How unevaluated* constrains here; refused by name where it cannot be said statically."""
    out = Unevaluated()
    for keyword in ("unevaluatedProperties", "unevaluatedItems"):
        value = node.get(keyword)
        if value is None or value is True or value == {}:
            continue  # why: an unevaluated* that allows everything constrains nothing
        where, items = child_pointer(pointer, keyword), keyword == "unevaluatedItems"
        outcomes = _outcomes(doc, node, pointer, items, frozenset(), where)
        if len(outcomes) == 1 and not outcomes[0][0]:
            found = outcomes[0][1]
            if found is None:
                continue  # why: a sibling evaluates everything (additionalProperties, items, ...)
            if items:
                out = replace(out, items_key=keyword, prefix=found[2])
            else:
                out = replace(out, props_key=keyword, keys=tuple(sorted(found[0])), patterns=tuple(sorted(found[1])))
            continue
        schema = Bound(Node(where), path)
        extra = or_(*(and_(*conds, _outside(found, items, schema)) for conds, found in outcomes))
        out = replace(out, extra=out.extra + (extra,))
    return out


Outcome = tuple[tuple[Expr, ...], Found]  # (in-place subschemas that pass, what is then evaluated)
_NOTHING: Found = (frozenset(), frozenset(), 0)


def _outcomes(doc: SchemaDocument, node: Any, pointer: str, items: bool, seen: frozenset[str],
              where: str) -> list[Outcome]:
    """Every way the schema at `pointer` and its in-place subschemas can pass, with what each evaluates.

    allOf/$ref subschemas always pass (their outcomes multiply); anyOf, oneOf, if/then/else and
    dependentSchemas add the conditions under which theirs count (see the module note).
    """
    if not isinstance(node, dict) or pointer in seen:
        return [((), _NOTHING)]
    nested, seen, keyword = bool(seen), seen | {pointer}, where.rsplit("/", 1)[-1]
    own = node.get("items")
    if items and "contains" in node:
        raise unsupported(keyword, where, "next to contains (it evaluates the items it matches)")
    if any(k in node for k in ("dependencies", "$recursiveRef")):
        raise unsupported(keyword, where, "next to dependencies or $recursiveRef")
    if items:
        everything = ((own is not None and not isinstance(own, list)) or (isinstance(own, list) and
                      "additionalItems" in node) or (nested and "unevaluatedItems" in node))
    else:
        everything = "additionalProperties" in node or (nested and "unevaluatedProperties" in node)
    if everything:
        return [((), None)]
    names = frozenset(node["properties"]) if isinstance(node.get("properties"), dict) else frozenset()
    patterns = frozenset(node["patternProperties"]) if isinstance(node.get("patternProperties"), dict) else frozenset()
    prefix_items = node.get("prefixItems", own if isinstance(own, list) else [])
    acc: list[Outcome] = [((), (names, patterns, len(prefix_items) if isinstance(prefix_items, list) else 0))]

    def sub(ptr: str) -> list[Outcome]:
        return _outcomes(doc, doc.lookup(ptr), ptr, items, seen, where)

    def given(cond: Expr, outs: list[Outcome]) -> list[Outcome]:
        return [((cond, *conds), found) for conds, found in outs]

    for i, _ in enumerate(node.get("allOf") or []):
        acc = _product(acc, sub(child_pointer(pointer, "allOf", i)), where)
    for key, resolve in (("$ref", doc.resolve), ("$dynamicRef", doc.resolve_dynamic)):
        if isinstance(node.get(key), str):
            acc = _product(acc, sub(resolve(node[key], pointer)), where)
    for key in ("anyOf", "oneOf"):
        branches = [child_pointer(pointer, key, i) for i in range(len(node.get(key) or []))]
        if key == "oneOf" and branches:
            acc = _product(acc, [o for b in branches for o in given(Node(b), sub(b))], where)
        elif branches and len(branches) > 4:
            raise unsupported(keyword, where, "next to an anyOf of more than 4 branches")
        elif branches:  # why: every non-empty set of passing branches; a larger one only weakens the constraint
            options: list[Outcome] = []
            for n in range(1, len(branches) + 1):
                for chosen in itertools.combinations(branches, n):
                    part: list[Outcome] = [((), _NOTHING)]
                    for b in chosen:
                        part = _product(part, given(Node(b), sub(b)), where)
                    options += part
            acc = _product(acc, options, where)
    if "if" in node:
        cond = Node(child_pointer(pointer, "if"))
        passed = _product(sub(child_pointer(pointer, "if")),
                          sub(child_pointer(pointer, "then")) if "then" in node else [((), _NOTHING)], where)
        nothing: list[Outcome] = [((), _NOTHING)]
        failed = sub(child_pointer(pointer, "else")) if "else" in node else nothing
        acc = _product(acc, given(cond, passed) + given(NotExpr(cond, child_pointer(pointer, "if")), failed), where)
    for name in node.get("dependentSchemas") or {}:
        present = _present(doc, pointer, name)
        acc = _product(acc, given(present, sub(child_pointer(pointer, "dependentSchemas", name))) + [((), _NOTHING)],
                       where)
    return acc


def _product(left: list[Outcome], right: list[Outcome], where: str) -> list[Outcome]:
    out = [(a + b, _union(fa, fb)) for a, fa in left for b, fb in right]
    if len(out) > MAX_OUTCOMES:
        raise unsupported(where.rsplit("/", 1)[-1], where, f"more than {MAX_OUTCOMES} outcomes of the applicators")
    return out


def _union(*parts: Found) -> Found:
    if any(p is None for p in parts):
        return None
    names = frozenset().union(*(p[0] for p in parts if p is not None))
    patterns = frozenset().union(*(p[1] for p in parts if p is not None))
    return names, patterns, max((p[2] for p in parts if p is not None), default=0)


def _outside(found: Found, items: bool, schema: Expr) -> Expr:
    """`schema` on every property (item) outside what `found` evaluates."""
    from sprig.grammar.schema.rewrites import pattern_regions

    if found is None:
        return TOP
    names, patterns, prefix = found
    if items:
        return Fixed(replace(ValueSet.top(), arrays=(ArrShape((TOP,) * prefix, schema),)))
    shape = ObjShape(tuple((k, TOP, False) for k in sorted(names)), schema,
                     patterns=pattern_regions([(p, TOP) for p in sorted(patterns)]))
    return Fixed(replace(ValueSet.top(), objects=(shape,)))


def _present(doc: SchemaDocument, pointer: str, name: str) -> Expr:
    from sprig.grammar.schema.rewrites import synthetic

    return synthetic(doc, child_pointer(pointer, "dependentSchemas", name) + "/~present", {"required": [name]},
                     pointer)
