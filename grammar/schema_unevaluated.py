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

Conditional applicators nested inside allOf/$ref subschemas are refused by name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from sprig.grammar.errors import unsupported
from sprig.grammar.schema_refs import SchemaDocument, child_pointer
from sprig.grammar.schema_values import (
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
from sprig.grammar.schema_values import Not as NotExpr

IN_PLACE = ("allOf", "anyOf", "oneOf", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef",
            "dependentSchemas", "dependencies")
CONDITIONAL = tuple(k for k in IN_PLACE if k not in ("allOf", "$ref", "$dynamicRef"))  # evaluate if they pass
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
        if items and "contains" in node:
            raise unsupported(keyword, where, "next to contains (it evaluates the items it matches)")
        static = {k: v for k, v in node.items() if k not in CONDITIONAL}
        found = _evaluated(doc, static, pointer, items, set(), where)
        if found is None:
            continue  # why: a sibling evaluates everything (additionalProperties, items, ...)
        if any(k in node for k in CONDITIONAL):
            schema = Bound(Node(where), path)
            out = replace(out, extra=out.extra + (_disjunction(doc, node, pointer, items, found, schema, where),))
        elif items:
            out = replace(out, items_key=keyword, prefix=found[2])
        else:
            out = replace(out, props_key=keyword, keys=tuple(sorted(found[0])), patterns=tuple(sorted(found[1])))
    return out


def _disjunction(doc: SchemaDocument, node: dict[str, Any], pointer: str, items: bool, static: Found,
                 schema: Expr, where: str) -> Expr:
    """The unevaluated* constraint as "some outcome of the conditional applicators, and `schema` outside
    what it evaluates"."""
    def found(key: str, *tokens: str | int) -> Found:
        sub_pointer = child_pointer(pointer, key, *tokens)
        return _evaluated(doc, doc.lookup(sub_pointer), sub_pointer, items, set(), where)

    keywords: list[list[tuple[tuple[Expr, ...], Found]]] = []
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            outs = [(Node(child_pointer(pointer, key, i)), found(key, i)) for i in range(len(branches))]
            if key == "oneOf":
                keywords.append([((cond,), f) for cond, f in outs])
            elif len(outs) <= 4:
                keywords.append([(tuple(outs[i][0] for i in t), _union(*(outs[i][1] for i in t)))
                                 for n in range(1, len(outs) + 1) for t in itertools.combinations(range(len(outs)), n)])
            else:
                raise unsupported(where.rsplit("/", 1)[-1], where, "next to an anyOf of more than 4 branches")
    if "if" in node:
        cond = Node(child_pointer(pointer, "if"))
        then = found("then") if "then" in node else _NOTHING
        other = found("else") if "else" in node else _NOTHING
        keywords.append([((cond,), _union(found("if"), then)), ((NotExpr(cond, child_pointer(pointer, "if")),), other)])
    for key in ("dependentSchemas", "dependencies", "$recursiveRef"):
        if key not in node:
            continue
        if key != "dependentSchemas" or not isinstance(node[key], dict):
            raise unsupported(where.rsplit("/", 1)[-1], where, f"next to {key}")
        for name in node[key]:
            present = _present(doc, pointer, name)
            keywords.append([((present,), found(key, name)), ((), _NOTHING)])
    combos = list(itertools.islice(itertools.product(*keywords), MAX_OUTCOMES + 1))
    if len(combos) > MAX_OUTCOMES:
        raise unsupported(where.rsplit("/", 1)[-1], where, f"more than {MAX_OUTCOMES} outcomes of the applicators")
    return or_(*(and_(*(c for conds, _ in combo for c in conds),
                      _outside(_union(static, *(f for _, f in combo)), items, schema)) for combo in combos))


_NOTHING: Found = (frozenset(), frozenset(), 0)


def _union(*parts: Found) -> Found:
    if any(p is None for p in parts):
        return None
    names = frozenset().union(*(p[0] for p in parts if p is not None))
    patterns = frozenset().union(*(p[1] for p in parts if p is not None))
    return names, patterns, max((p[2] for p in parts if p is not None), default=0)


def _outside(found: Found, items: bool, schema: Expr) -> Expr:
    """`schema` on every property (item) outside what `found` evaluates."""
    from sprig.grammar.schema_deps import pattern_regions

    if found is None:
        return TOP
    names, patterns, prefix = found
    if items:
        return Fixed(replace(ValueSet.top(), arrays=(ArrShape((TOP,) * prefix, schema),)))
    shape = ObjShape(tuple((k, TOP, False) for k in sorted(names)), schema,
                     patterns=pattern_regions([(p, TOP) for p in sorted(patterns)]))
    return Fixed(replace(ValueSet.top(), objects=(shape,)))


def _present(doc: SchemaDocument, pointer: str, name: str) -> Expr:
    from sprig.grammar.schema_deps import synthetic

    return synthetic(doc, child_pointer(pointer, "dependentSchemas", name) + "/~present", {"required": [name]},
                     pointer)


def _evaluated(doc: SchemaDocument, node: Any, pointer: str, items: bool, seen: set[str],
               where: str) -> Found:
    """(property names, patterns, prefix length) the schema at `pointer` and its allOf/$ref subschemas
    evaluate on any instance they accept; None where they evaluate every property (or item)."""
    if not isinstance(node, dict) or pointer in seen:
        return _NOTHING
    seen.add(pointer)
    keyword = where.rsplit("/", 1)[-1]
    if any(k in node for k in CONDITIONAL) or (items and "contains" in node):
        raise unsupported(keyword, where, "with applicators that evaluate only when they pass (anyOf, if, ...) "
                                          "inside allOf or $ref")
    nested, own = seen != {pointer}, node.get("items")
    if items:
        everything = ((own is not None and not isinstance(own, list)) or (isinstance(own, list) and
                      "additionalItems" in node) or (nested and "unevaluatedItems" in node))
    else:
        everything = "additionalProperties" in node or (nested and "unevaluatedProperties" in node)
    if everything:
        return None
    names = frozenset(node["properties"]) if isinstance(node.get("properties"), dict) else frozenset()
    patterns = frozenset(node["patternProperties"]) if isinstance(node.get("patternProperties"), dict) else frozenset()
    prefix_items = node.get("prefixItems", own if isinstance(own, list) else [])
    acc: Found = (names, patterns, len(prefix_items) if isinstance(prefix_items, list) else 0)
    subs = [(child_pointer(pointer, "allOf", i), s) for i, s in enumerate(node.get("allOf") or [])]
    for key, resolve in (("$ref", doc.resolve), ("$dynamicRef", doc.resolve_dynamic)):
        if isinstance(node.get(key), str):
            target = resolve(node[key], pointer)
            subs.append((target, doc.lookup(target)))
    for sub_pointer, sub in subs:
        acc = _union(acc, _evaluated(doc, sub, sub_pointer, items, seen, where))
        if acc is None:
            return None
    return acc
