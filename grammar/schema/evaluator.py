"""JSON Schema keywords → `ValueSet`s: the meaning of each subschema, evaluated on demand.

`Evaluator.eval(expr, path)` computes the values an expression allows at one instance location. Child
locations (array items, property values) stay lazy `Expr`s inside shapes, so recursion through `$ref` only
unfolds as far as the emitter descends; `path` lists the `$ref` targets entered on the way down, and a
target entered more than `max_recursion_depth` times allows nothing there. A `$ref` that comes back to the
same instance location without descending is a cycle and an error.
Longer than 450 lines: one keyword dispatch over a schema node, whose per-keyword readers share its state.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

from sprig.grammar.errors import GrammarError, GrammarErrorCode, invalid_schema, too_complex, unsupported
from sprig.grammar.regex.pattern import PatternSyntaxError, PatternUnsupported
from sprig.grammar.schema import strings
from sprig.grammar.schema.formats import SUPPORTED_FORMATS
from sprig.grammar.schema.load import parse_json
from sprig.grammar.schema.numbers import NumSet
from sprig.grammar.schema.refs import SchemaDocument, child_pointer
from sprig.grammar.schema.rewrites import (
    DEPENDENCY_KEYWORDS,
    NUMERIC_FORMATS,
    conditional,
    dependency_parts,
    integer_format_part,
    multiple_of,
    pattern_properties,
    pattern_regions,
    schema_types,
)
from sprig.grammar.schema.unevaluated import Unevaluated, unevaluated_keys
from sprig.grammar.schema.values import (
    BOTTOM,
    S_ALL,
    TOP,
    And,
    ArrShape,
    Bound,
    Expr,
    Fixed,
    Node,
    NotRepresentable,
    ObjShape,
    OneOf,
    Or,
    Ref,
    SExpr,
    SFormat,
    SLits,
    SPattern,
    Value,
    ValueSet,
    and_,
    s_and,
    s_len,
    stamp_witnesses,
)
from sprig.grammar.schema.values import Not as NotExpr
from sprig.grammar.spec import JsonOptions

ANNOTATIONS = frozenset({
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
    "contentMediaType", "contentEncoding", "contentSchema", "$id", "$anchor", "$defs", "definitions", "$schema",
    "$vocabulary", "then", "else", "additionalItems",
})
KNOWN_SCHEMAS = frozenset({
    "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-04/schema",
})
VOCABULARY = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
    "maxProperties", "minProperties", "required", "dependentRequired", "prefixItems", "items", "contains",
    "additionalProperties", "properties", "patternProperties", "propertyNames", "allOf", "anyOf", "oneOf",
    "not", "if", "then", "else", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties", "$ref",
    "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "format", "dependencies",
})
NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
ARRAY_KEYS = ("prefixItems", "items", "minItems", "maxItems", "additionalItems", "contains", "minContains",
              "maxContains", "unevaluatedItems", "uniqueItems")
OBJECT_KEYS = ("properties", "required", "additionalProperties", "minProperties", "maxProperties",
               "patternProperties", "propertyNames", "unevaluatedProperties")
MAX_ENUM = 10_000
MAX_BRANCHES = 1024  # allOf / anyOf / prefixItems
MAX_ONE_OF = 128  # why: exactness checks every pair of oneOf branches
MAX_EXPONENT, MAX_DIGITS = 400, 400  # why: beyond doubles' range the digit-range regexes only grow
RECURSIVE_KEYWORDS = ("$recursiveRef", "$recursiveAnchor")  # draft 2019-09's dynamic references
HANDLED = frozenset(NUMBER_KEYS + STRING_KEYS + ARRAY_KEYS + OBJECT_KEYS + DEPENDENCY_KEYWORDS + (
    "multipleOf", "$dynamicRef", "$dynamicAnchor", "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "$ref", "if"))


def canonical(value: Any) -> str:
    """Canonical JSON text of a parsed value (numbers by value: 1, 1.0 and 1e0 all spell "1")."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | Decimal):
        d = Decimal(value)
        return str(int(d)) if d == d.to_integral_value() else format(d.normalize(), "f")
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v) for k, v in value.items()) + "}"


def literal_set(value: Any) -> ValueSet:
    """The value set holding exactly one JSON value."""
    bottom = ValueSet.bottom()
    if value is None:
        return replace(bottom, null=True)
    if isinstance(value, bool):
        return replace(bottom, bools=frozenset((value,)))
    if isinstance(value, int | Decimal):
        return literal_union([value])
    if isinstance(value, str):
        return replace(bottom, strings=SLits(frozenset((value,))))
    if isinstance(value, list):
        return replace(bottom, arrays=(ArrShape(tuple(Value(canonical(v)) for v in value), BOTTOM,
                                                len(value), len(value)),))
    return replace(bottom, objects=(ObjShape(tuple((k, Value(canonical(v)), True) for k, v in value.items()),
                                             BOTTOM),))


def literal_union(values: list[Any]) -> ValueSet:
    """The value set of an enum, built in one pass (a union per value would be quadratic)."""
    strings_ = frozenset(v for v in values if isinstance(v, str))
    numbers = [Decimal(v) for v in values if isinstance(v, int | Decimal) and not isinstance(v, bool)]
    for d in numbers:
        _check_magnitude(d, "")
    acc = replace(ValueSet.bottom(), null=None in values, bools=frozenset(v for v in values if isinstance(v, bool)),
                  ints=NumSet.points([d for d in numbers if d == d.to_integral_value()], True),
                  fracs=NumSet.points([d for d in numbers if d != d.to_integral_value()], False))
    if strings_:
        acc = replace(acc, strings=SLits(strings_))
    for value in values:
        if isinstance(value, list | dict):
            acc = acc.union(literal_set(value))
    return acc


def _check_magnitude(d: Decimal, pointer: str) -> None:
    if d.is_finite() and (abs(d.adjusted()) > MAX_EXPONENT or len(d.as_tuple().digits) > MAX_DIGITS):
        raise too_complex(f"number {str(d)[:20]}... has too many digits", pointer)


class Evaluator:
    """Evaluates expressions of one schema document into value sets (memoized per location and path)."""

    key_witnesses = False  # why: only the grammar backend writes "some key has such a value" (oneOf overlaps)

    def __init__(self, doc: SchemaDocument, options: JsonOptions) -> None:
        self.doc, self.options = doc, options
        self._memo: dict[tuple[Expr, tuple[str, ...]], ValueSet] = {}
        self._local: list[str] = []  # $ref targets entered at the current instance location

    def eval(self, expr: Expr, path: tuple[str, ...]) -> ValueSet:
        key = (expr, path)
        if key not in self._memo:
            self._memo[key] = self._eval(expr, path)
        return self._memo[key]

    def eval_child(self, expr: Expr, path: tuple[str, ...]) -> ValueSet:
        """Evaluate at a new instance location (one level down)."""
        saved, self._local = self._local, []
        try:
            return self.eval(expr, path)
        finally:
            self._local = saved

    def _eval(self, expr: Expr, path: tuple[str, ...]) -> ValueSet:
        if isinstance(expr, Bound):
            return self.eval(expr.item, expr.path)
        if isinstance(expr, Node):
            return self._eval_schema(expr.pointer, path)
        if isinstance(expr, Ref):
            return self._eval_ref(expr, path)
        if isinstance(expr, And):
            acc = ValueSet.top()
            for item in sorted(expr.items, key=repr):
                acc = acc.intersect(self.eval(item, path), member=strings.member)
            return acc
        if isinstance(expr, Or):
            acc = ValueSet.bottom()
            for item in sorted(expr.items, key=repr):
                acc = acc.union(self.eval(item, path))
            return acc
        if isinstance(expr, NotExpr):
            keyword = expr.origin.rsplit("/", 1)[-1] or "not"
            return self._complement(self.eval(expr.item, path), keyword, expr.origin)
        if isinstance(expr, OneOf):
            from sprig.grammar.schema.oneof import exactly_one
            return exactly_one(self, [self.eval(i, path) for i in expr.items], path, expr.origin)
        if isinstance(expr, Fixed):
            return expr.value
        assert isinstance(expr, Value)
        return literal_set(parse_json(expr.text))

    def _complement(self, vs: ValueSet, keyword: str, pointer: str) -> ValueSet:
        try:
            out = vs.complement()
        except NotRepresentable as exc:
            raise unsupported(keyword, pointer, f"cannot negate a constraint on '{exc}'") from None
        return replace(out, objects=stamp_witnesses(out.objects, pointer))

    def _eval_ref(self, ref: Ref, path: tuple[str, ...]) -> ValueSet:
        if ref.pointer in self._local:
            raise invalid_schema("$ref cycle that never reaches a value", ref.origin)
        if path.count(ref.pointer) >= self.options.max_recursion_depth:
            return ValueSet.bottom()  # why: recursion deeper than allowed generates nothing here
        self._local.append(ref.pointer)
        try:
            return self.eval(Node(ref.pointer), path + (ref.pointer,))
        finally:
            self._local.pop()

    def _eval_schema(self, pointer: str, path: tuple[str, ...]) -> ValueSet:
        node = self.doc.lookup(pointer)
        if node is True or node is False:
            return ValueSet.top() if node else ValueSet.bottom()
        if not isinstance(node, dict):
            raise invalid_schema("a schema must be an object or a boolean", pointer)
        if self.doc.ref_overrides and "$ref" in node:  # why: drafts 4-7 ignore a $ref's siblings
            node = {"$ref": node["$ref"]}
        self._check_keywords(node, pointer)
        acc = ValueSet.top()
        for part in self._parts(node, pointer, path):
            acc = acc.intersect(self.eval(part, path) if isinstance(part, Expr) else part, member=strings.member)
        return acc

    def _check_keywords(self, node: dict[str, Any], pointer: str) -> None:
        for key in node:
            if key in HANDLED or key in ANNOTATIONS or _trivial(key, node):
                continue
            if key in RECURSIVE_KEYWORDS and self.doc.draft == 2019:
                continue
            if key in VOCABULARY or self.options.strict:
                raise unsupported(key, child_pointer(pointer, key))
        schema = node.get("$schema")
        if schema is not None and (not isinstance(schema, str) or schema.rstrip("#") not in KNOWN_SCHEMAS):
            raise unsupported("$schema", child_pointer(pointer, "$schema"), "unknown meta-schema")

    def _parts(self, node: dict[str, Any], pointer: str, path: tuple[str, ...]):
        """What this schema object intersects: value sets per keyword group and lazy sub-expressions."""
        if "type" in node:
            yield schema_types(node["type"], child_pointer(pointer, "type"))
        if "enum" in node:
            values = node["enum"]
            if not isinstance(values, list):
                raise invalid_schema("enum must be an array", child_pointer(pointer, "enum"))
            if len(values) > MAX_ENUM:
                raise too_complex(f"enum with more than {MAX_ENUM} values", child_pointer(pointer, "enum"))
            yield literal_union(values)
        if "const" in node:
            yield literal_set(node["const"])
        if any(k in node for k in NUMBER_KEYS):
            yield _numbers(node, pointer)
        if "multipleOf" in node:
            yield multiple_of(node, pointer)
        if any(k in node for k in STRING_KEYS):
            yield self._strings(node, pointer)
        unevaluated = unevaluated_keys(self.doc, node, pointer, path)
        yield from unevaluated.extra
        if any(k in node for k in ARRAY_KEYS):
            yield _arrays(node, pointer, path, unevaluated)
        if any(k in node for k in OBJECT_KEYS):
            names = S_ALL
            if "propertyNames" in node:  # why: the key language, from the strings the subschema allows
                names = self.eval_child(_child(pointer, path, "propertyNames"), path).strings
            yield _objects(node, pointer, path, self.options.allow_extra_properties, names, unevaluated)
        yield from self._applicators(node, pointer, path)
        yield from dependency_parts(self.doc, node, pointer)
        integer_format = integer_format_part(node)
        if integer_format is not None:
            yield integer_format

    def _dynamic_ref(self, ref: str, pointer: str, path: tuple[str, ...]) -> str:
        """The target of a `$dynamicRef` (here: only where dynamic scope cannot change it)."""
        return self.doc.resolve_dynamic(ref, pointer)

    def _recursive_ref(self, pointer: str, path: tuple[str, ...]) -> str:
        """The target of a `$recursiveRef` (here: only where dynamic scope cannot change it)."""
        return self.doc.resolve_recursive(pointer)

    def _applicators(self, node: dict[str, Any], pointer: str, path: tuple[str, ...]):
        for key in ("allOf", "anyOf", "oneOf"):
            if key in node:
                items = _schema_list(node[key], child_pointer(pointer, key))
                exprs = [Node(child_pointer(pointer, key, i)) for i in range(len(items))]
                yield (and_(*exprs) if key == "allOf" else
                       Or(frozenset(exprs)) if key == "anyOf" else OneOf(tuple(exprs), child_pointer(pointer, key)))
        if "not" in node:
            yield NotExpr(Node(child_pointer(pointer, "not")), child_pointer(pointer, "not"))
        if "if" in node:
            yield conditional(node, pointer)
        if "$ref" in node:
            if not isinstance(node["$ref"], str):
                raise invalid_schema("$ref must be a string", child_pointer(pointer, "$ref"))
            yield Ref(self.doc.resolve(node["$ref"], pointer), child_pointer(pointer, "$ref"))
        if "$dynamicRef" in node and self.doc.draft >= 2020:
            if not isinstance(node["$dynamicRef"], str):
                raise invalid_schema("$dynamicRef must be a string", child_pointer(pointer, "$dynamicRef"))
            yield Ref(self._dynamic_ref(node["$dynamicRef"], pointer, path), child_pointer(pointer, "$dynamicRef"))
        if "$recursiveRef" in node and self.doc.draft == 2019:
            if node["$recursiveRef"] != "#":
                raise unsupported("$recursiveRef", child_pointer(pointer, "$recursiveRef"), 'only "#"')
            yield Ref(self._recursive_ref(pointer, path), child_pointer(pointer, "$recursiveRef"))

    def _strings(self, node: dict[str, Any], pointer: str) -> ValueSet:
        lo = _count(node, "minLength", pointer, 0) or 0
        hi = _count(node, "maxLength", pointer, None)
        parts = [s_len(lo, hi)]
        if "pattern" in node:
            parts.append(_pattern(node["pattern"], child_pointer(pointer, "pattern")))
        if "format" in node:
            fmt = node["format"]
            if not isinstance(fmt, str):
                raise invalid_schema("format must be a string", child_pointer(pointer, "format"))
            if fmt in SUPPORTED_FORMATS:
                parts.append(SFormat(fmt))
            elif self.options.strict and fmt not in NUMERIC_FORMATS:  # why: those bound numbers, not strings
                raise unsupported("format", child_pointer(pointer, "format"), f"format {fmt[:40]!r}")
        return replace(ValueSet.top(), strings=s_and(*parts))


def _trivial(key: str, node: dict[str, Any]) -> bool:
    """Keywords whose given value constrains nothing (uniqueItems: false, minProperties: 0, ...)."""
    value = node[key]
    return ((key == "uniqueItems" and value is False) or (key == "minProperties" and value == 0)
            or (key in ("dependentRequired", "dependentSchemas", "patternProperties") and value == {}))


def _number(node: dict[str, Any], key: str, pointer: str) -> Decimal | None:
    value = node.get(key)
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int | Decimal):
        raise invalid_schema(f"{key} must be a number", child_pointer(pointer, key))
    _check_magnitude(Decimal(value), child_pointer(pointer, key))
    return Decimal(value)


def _numbers(node: dict[str, Any], pointer: str) -> ValueSet:
    ints, fracs = NumSet.everything(True), NumSet.everything(False)
    bounds = [("minimum", True, True), ("maximum", False, True), ("exclusiveMinimum", True, False),
              ("exclusiveMaximum", False, False)]
    for key, lower, inclusive in bounds:
        value = _number(node, key, pointer)
        if value is None:
            continue
        if inclusive and node.get("exclusive" + key[:1].upper() + key[1:]) is True:  # draft-04 booleans
            inclusive = False
        make = NumSet.at_least if lower else NumSet.at_most
        ints, fracs = ints.intersect(make(value, inclusive, True)), fracs.intersect(make(value, inclusive, False))
    return replace(ValueSet.top(), ints=ints, fracs=fracs)


def _count(node: dict[str, Any], key: str, pointer: str, default: int | None) -> int | None:
    if key not in node:
        return default
    value = node[key]
    if isinstance(value, bool) or not isinstance(value, int | Decimal) or value < 0 or value != int(value):
        raise invalid_schema(f"{key} must be a non-negative integer", child_pointer(pointer, key))
    return int(value)


def _pattern(value: Any, pointer: str) -> SPattern:
    if not isinstance(value, str):
        raise invalid_schema("pattern must be a string", pointer)
    try:
        strings.pattern_language(value)
    except PatternSyntaxError as exc:
        raise GrammarError(f"invalid regex in pattern at '{pointer}': {exc}", GrammarErrorCode.INVALID_REGEX,
                           pointer=pointer) from None
    except PatternUnsupported as exc:
        raise unsupported("pattern", pointer, str(exc)) from None
    return SPattern(value)


def _schema_list(value: Any, pointer: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise invalid_schema("must be a non-empty array of schemas", pointer)
    limit = MAX_ONE_OF if pointer.endswith("/oneOf") else MAX_BRANCHES
    if len(value) > limit:
        raise too_complex(f"more than {limit} subschemas", pointer)
    return value


def _child(pointer: str, path: tuple[str, ...], *tokens: str | int) -> Expr:
    """A subschema at an instance location one level down, bound to the $ref path above it."""
    return Bound(Node(child_pointer(pointer, *tokens)), path)


def _arrays(node: dict[str, Any], pointer: str, path: tuple[str, ...], unevaluated: Unevaluated) -> ValueSet:
    prefix: tuple[Expr, ...] = ()
    tail: Expr = TOP
    items = node.get("items")
    if "prefixItems" in node:
        n = len(_schema_list(node["prefixItems"], child_pointer(pointer, "prefixItems")))
        prefix = tuple(_child(pointer, path, "prefixItems", i) for i in range(n))
    if isinstance(items, list):  # draft-07 tuple form: items is the prefix, additionalItems the rest
        prefix = tuple(_child(pointer, path, "items", i) for i in range(len(items)))
        if "additionalItems" in node:
            tail = _child(pointer, path, "additionalItems")
    elif items is not None:
        tail = _child(pointer, path, "items")
    if unevaluated.items_key is not None:  # unevaluatedItems values what items would, after what allOf evaluates
        tail = _child(pointer, path, unevaluated.items_key)
        prefix += (TOP,) * max(unevaluated.prefix - len(prefix), 0)
    contains: tuple[tuple[Expr, int, int | None], ...] = ()
    if "contains" in node:  # why: minContains/maxContains mean nothing without it
        lo, hi = _count(node, "minContains", pointer, 1) or 0, _count(node, "maxContains", pointer, None)
        if lo > 0 or hi is not None:
            contains = ((_child(pointer, path, "contains"), lo, hi),)
    unique = child_pointer(pointer, "uniqueItems") if node.get("uniqueItems") is True else ""
    shape = ArrShape(prefix, tail, _count(node, "minItems", pointer, 0) or 0, _count(node, "maxItems", pointer, None),
                     contains, unique)
    return replace(ValueSet.top(), arrays=(shape,))


def _objects(node: dict[str, Any], pointer: str, path: tuple[str, ...], extra: bool, names: SExpr,
             unevaluated: Unevaluated) -> ValueSet:
    props = node.get("properties", {})
    required = node.get("required", [])
    if not isinstance(props, dict):
        raise invalid_schema("properties must be an object", child_pointer(pointer, "properties"))
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise invalid_schema("required must be an array of strings", child_pointer(pointer, "required"))
    explicit = unevaluated.props_key in node
    additional = _child(pointer, path, unevaluated.props_key) if explicit else TOP if extra else BOTTOM
    if explicit and node[unevaluated.props_key] is False:  # why: a literal BOTTOM lets oneOf see disjoint keys
        additional = BOTTOM  # without evaluating their values (a recursive $ref there would loop)
    found = pattern_properties(node, pointer, path)
    found += [(p, TOP) for p in unevaluated.patterns if p not in dict(found)]  # why: evaluated by allOf/$ref

    def value(key: str, declared: Expr | None) -> Expr:
        if names != S_ALL and not strings.member(names, key):
            return BOTTOM  # why: propertyNames forbids this key
        matching = [expr for pattern, expr in found if strings.member(SPattern(pattern), key)]
        if declared is None:
            declared = TOP if matching or not explicit else additional
        return and_(declared, *matching)

    entries = [(k, value(k, _child(pointer, path, "properties", k)), k in required) for k in props]
    entries += [(k, value(k, TOP), k in required) for k in unevaluated.keys if k not in props]
    entries += [(k, value(k, None), True) for k in dict.fromkeys(required) if k not in props]
    lo, hi = _count(node, "minProperties", pointer, 0) or 0, _count(node, "maxProperties", pointer, None)
    origin = child_pointer(pointer, "minProperties" if lo else "maxProperties") if lo or hi is not None else ""
    return replace(ValueSet.top(), objects=(ObjShape(tuple(entries), additional, lo, hi, origin,
                                                     pattern_regions(found), names),))
