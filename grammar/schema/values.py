"""The meaning of a JSON schema as a set of JSON values, with the boolean algebra JSON Schema needs.

A `ValueSet` splits the values by type: null, booleans, integers and non-integers (interval sets), strings
(an expression over length, pattern, format and literal atoms) and arrays and objects (unions of shapes
whose parts are lazy `Expr`s, evaluated only when emitted, which is how recursive schemas stay finite).
Keywords that apply to one type leave the others untouched, which is JSON Schema's rule. `allOf` is
intersection, `anyOf` union; `not` and `oneOf` use complement (De Morgan over the atoms of a shape).
Longer than 450 lines: the value set, its shapes and their complements (key witnesses included) are one algebra.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sprig.grammar.errors import too_complex
from sprig.grammar.schema import intsteps
from sprig.grammar.schema.numbers import NumSet

MAX_SHAPES = 256  # why: unions of shapes multiply under intersection and complement


def _no_membership(expr: SExpr, key: str) -> bool:
    raise RuntimeError("sprig.grammar.schema.strings decides key languages and is not loaded")


# Whether a key is in a key language is decided by `strings.member`, which needs this module's types:
# strings plugs it in here when it loads (every schema evaluator imports strings).
_KEY_MEMBERSHIP: list[Callable[[SExpr, str], bool]] = [_no_membership]


def use_key_membership(member: Callable[[SExpr, str], bool]) -> None:
    _KEY_MEMBERSHIP[0] = member


class NotRepresentable(Exception):
    """A complement the shape algebra cannot express (e.g. "some extra property is invalid")."""


# ---- lazy schema expressions ----------------------------------------------------------------------------

class Expr:
    __slots__ = ()


@dataclass(frozen=True)
class Node(Expr):
    pointer: str  # a subschema of the document, by JSON pointer


@dataclass(frozen=True)
class Ref(Expr):
    pointer: str  # the same, reached through $ref (counted against the recursion depth)
    origin: str  # where the $ref is, for error messages


@dataclass(frozen=True)
class Bound(Expr):
    item: Expr
    path: tuple[str, ...]  # the $ref targets entered above the schema that holds `item`


@dataclass(frozen=True)
class And(Expr):
    items: frozenset[Expr]


@dataclass(frozen=True)
class Or(Expr):
    items: frozenset[Expr]


@dataclass(frozen=True)
class Not(Expr):
    item: Expr
    origin: str = ""  # the `not`/`if` keyword, for error messages


@dataclass(frozen=True)
class OneOf(Expr):
    items: tuple[Expr, ...]
    origin: str


@dataclass(frozen=True)
class Value(Expr):
    text: str  # one JSON value, canonical text


@dataclass(frozen=True)
class Fixed(Expr):
    value: ValueSet  # a value set built by the evaluator itself (unevaluated* outcomes)


TOP: Expr = And(frozenset())
BOTTOM: Expr = Or(frozenset())


def and_(*items: Expr) -> Expr:
    flat: set[Expr] = set()
    for item in items:
        if item == BOTTOM:
            return BOTTOM
        flat.update(item.items if isinstance(item, And) else (item,))
    if len(flat) == 1:
        return next(iter(flat))
    scalars = {i for i in flat if isinstance(i, Value) and i.text[:1] not in "[{"}
    if len(scalars) > 1:  # why: two different scalar literals never hold at once (their text is canonical)
        return BOTTOM
    return And(frozenset(flat))


def or_(*items: Expr) -> Expr:
    flat: set[Expr] = set()
    for item in items:
        if item == TOP:
            return TOP
        flat.update(item.items if isinstance(item, Or) else (item,))
    return next(iter(flat)) if len(flat) == 1 else Or(frozenset(flat))


def not_(item: Expr) -> Expr:
    if isinstance(item, Not):
        return item.item
    return BOTTOM if item == TOP else TOP if item == BOTTOM else Not(item)


# ---- string languages ------------------------------------------------------------------------------------

class SExpr:
    __slots__ = ()


@dataclass(frozen=True)
class SLen(SExpr):
    lo: int
    hi: int | None


@dataclass(frozen=True)
class SPattern(SExpr):
    pattern: str  # ECMA-262, search semantics


@dataclass(frozen=True)
class SFormat(SExpr):
    name: str


@dataclass(frozen=True)
class SLits(SExpr):
    values: frozenset[str]


@dataclass(frozen=True)
class SAnd(SExpr):
    items: frozenset[SExpr]


@dataclass(frozen=True)
class SOr(SExpr):
    items: frozenset[SExpr]


@dataclass(frozen=True)
class SNot(SExpr):
    item: SExpr


S_ALL: SExpr = SAnd(frozenset())
S_NONE: SExpr = SOr(frozenset())


def s_and(*items: SExpr, member=None) -> SExpr:
    """Intersection; `member(sexpr, text)` lets a literal set absorb the other atoms exactly."""
    flat: set[SExpr] = set()
    for item in items:
        if item == S_NONE:
            return S_NONE
        flat.update(item.items if isinstance(item, SAnd) else (item,))
    lens = [i for i in flat if isinstance(i, SLen)]
    if len(lens) > 1:
        flat -= set(lens)
        his = [x.hi for x in lens if x.hi is not None]
        flat.add(s_len(max(x.lo for x in lens), min(his) if his else None))
        flat.discard(S_ALL)
        if S_NONE in flat:
            return S_NONE
    lits = [i for i in flat if isinstance(i, SLits)]
    if lits and member is not None:
        others = [i for i in flat if i not in lits]
        keep = frozenset.intersection(*(x.values for x in lits))
        keep = frozenset(v for v in keep if all(member(o, v) for o in others))
        return SLits(keep) if keep else S_NONE
    return next(iter(flat)) if len(flat) == 1 else SAnd(frozenset(flat))


def s_or(*items: SExpr) -> SExpr:
    flat: set[SExpr] = set()
    for item in items:
        if item == S_ALL:
            return S_ALL
        flat.update(item.items if isinstance(item, SOr) else (item,))
    lits = [i for i in flat if isinstance(i, SLits)]
    if len(lits) > 1:
        flat -= set(lits)
        flat.add(SLits(frozenset().union(*(x.values for x in lits))))
    return next(iter(flat)) if len(flat) == 1 else SOr(frozenset(flat))


def s_not(item: SExpr) -> SExpr:
    if isinstance(item, SNot):
        return item.item
    return S_NONE if item == S_ALL else S_ALL if item == S_NONE else SNot(item)


def s_len(lo: int, hi: int | None) -> SExpr:
    if hi is not None and lo > hi:
        return S_NONE
    return S_ALL if lo == 0 and hi is None else SLen(lo, hi)


# ---- arrays and objects ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArrShape:
    """Arrays whose item i matches prefix[i] (items beyond the prefix match `items`), with a length range."""

    prefix: tuple[Expr, ...] = ()
    items: Expr = TOP
    min_items: int = 0
    max_items: int | None = None
    contains: tuple[tuple[Expr, int, int | None], ...] = ()  # (schema, min, max items matching it)
    unique: str = ""  # uniqueItems: true, as the keyword's pointer ("" = items may repeat)

    def at(self, i: int) -> Expr:
        return self.prefix[i] if i < len(self.prefix) else self.items

    def trivially_empty(self) -> bool:
        if self.max_items is not None and self.min_items > self.max_items:
            return True
        if any((expr == BOTTOM and lo > 0) or (hi is not None and lo > hi) or
               (self.max_items is not None and lo > self.max_items) for expr, lo, hi in self.contains):
            return True
        return any(self.at(i) == BOTTOM for i in range(min(self.min_items, len(self.prefix) + 1)))


@dataclass(frozen=True)
class Witness:
    """"Some key in `keys` has a value in `value`": what a complemented key rule leaves (any key may be it)."""

    keys: SExpr
    value: Expr
    origin: str = field(default="", compare=False)  # the `not`/`oneOf` that made it, for refusals


@dataclass(frozen=True)
class ObjShape:
    """Objects with these keys (in output order; value expr, required) and other keys valued by `additional`.

    A key whose expr is BOTTOM is forbidden.
    """

    entries: tuple[tuple[str, Expr, bool], ...] = ()
    additional: Expr = TOP
    min_props: int = 0  # minProperties / maxProperties: how many keys the object has
    max_props: int | None = None
    origin: str = field(default="", compare=False)  # where a count came from, for refusals
    # patternProperties: undeclared keys in these disjoint languages take these values (others: additional)
    patterns: tuple[tuple[SExpr, Expr], ...] = ()
    names: SExpr = S_ALL  # propertyNames: every key is in this language
    some: tuple[Witness, ...] = ()  # and each witness holds for at least one key (declared or not)

    def value_for(self, key: str) -> Expr:
        for k, expr, _ in self.entries:
            if k == key:
                return expr
        if self.names == S_ALL and not self.patterns:
            return self.additional
        member = _KEY_MEMBERSHIP[0]
        if self.names != S_ALL and not member(self.names, key):
            return BOTTOM
        for lang, expr in self.patterns:
            if member(lang, key):
                return expr
        return self.additional

    def regions(self) -> list[tuple[SExpr, Expr]]:
        """(key language, value) for undeclared keys: the pattern regions, then the rest (additional)."""
        rest = s_not(s_or(*(lang for lang, _ in self.patterns))) if self.patterns else S_ALL
        return [*self.patterns, (rest, self.additional)]

    def is_required(self, key: str) -> bool:
        return any(k == key and req for k, _, req in self.entries)

    def trivially_empty(self) -> bool:
        if any(w.value == BOTTOM or w.keys == S_NONE for w in self.some):
            return True
        if any(req and expr == BOTTOM for _, expr, req in self.entries):
            return True
        required = sum(1 for _, _, req in self.entries if req)
        closed = self.additional == BOTTOM and all(e == BOTTOM for _, e in self.patterns)
        possible = sum(1 for _, e, _ in self.entries if e != BOTTOM) if closed else None
        return ((self.max_props is not None and max(self.min_props, required) > self.max_props)
                or (possible is not None and possible < self.min_props))

    def counted(self) -> bool:
        """Whether the number of keys is bounded (minProperties / maxProperties)."""
        return self.min_props > 0 or self.max_props is not None


def array_and(a: ArrShape, b: ArrShape) -> ArrShape:
    n = max(len(a.prefix), len(b.prefix))
    his = [x for x in (a.max_items, b.max_items) if x is not None]
    return ArrShape(tuple(and_(a.at(i), b.at(i)) for i in range(n)), and_(a.items, b.items),
                    max(a.min_items, b.min_items), min(his) if his else None,
                    a.contains + tuple(c for c in b.contains if c not in a.contains), a.unique or b.unique)


def object_and(a: ObjShape, b: ObjShape) -> ObjShape:
    keys = [k for k, _, _ in a.entries] + [k for k, _, _ in b.entries if all(k != x for x, _, _ in a.entries)]
    entries = tuple((k, and_(a.value_for(k), b.value_for(k)), a.is_required(k) or b.is_required(k)) for k in keys)
    his = [x for x in (a.max_props, b.max_props) if x is not None]
    patterns: tuple[tuple[SExpr, Expr], ...] = ()
    if a.patterns or b.patterns:  # why: every pair of regions, except rest x rest (the new rest)
        ra, rb = a.regions(), b.regions()
        patterns = tuple((s_and(la, lb), and_(ea, eb)) for i, (la, ea) in enumerate(ra)
                         for j, (lb, eb) in enumerate(rb) if i < len(ra) - 1 or j < len(rb) - 1)
    return ObjShape(entries, and_(a.additional, b.additional), max(a.min_props, b.min_props),
                    min(his) if his else None, a.origin or b.origin, patterns, s_and(a.names, b.names),
                    a.some + tuple(w for w in b.some if w not in a.some))


def array_not(a: ArrShape) -> list[ArrShape]:
    if a.unique:
        raise NotRepresentable("uniqueItems")  # why: "some item repeats" is no shape
    out: list[ArrShape] = []
    if a.min_items > 0:
        out.append(ArrShape(max_items=a.min_items - 1))
    if a.max_items is not None:
        out.append(ArrShape(min_items=a.max_items + 1))
    for expr, lo, hi in a.contains:  # why: too few or too many matching items, whatever the rest is
        if lo > 0:
            out.append(ArrShape(contains=((expr, 0, lo - 1),)))
        if hi is not None:
            out.append(ArrShape(contains=((expr, hi + 1, None),)))
    for i, expr in enumerate(a.prefix):
        if expr != TOP:
            out.append(ArrShape((TOP,) * i + (not_(expr),), TOP, i + 1, None))
    if a.items != TOP:
        if a.prefix:  # why: `contains` counts the prefix too, so "some later item fails" is no shape
            raise NotRepresentable("items")
        out.append(ArrShape(contains=((not_(a.items), 1, None),)))  # why: some item fails `items`
    return out


def object_not(a: ObjShape, witnesses: bool = True) -> list[ObjShape]:
    """The complement of one shape as a union of shapes; without `witnesses`, key rules are not complemented
    (NotRepresentable), which bounds the shapes a oneOf over many overlapping branches multiplies."""
    if not witnesses and (a.names != S_ALL or a.some or any(e != TOP for _, e in a.regions())):
        raise NotRepresentable("propertyNames" if a.names != S_ALL else "patternProperties"
                               if any(e != TOP for _, e in a.patterns) else "additionalProperties")
    out: list[ObjShape] = []
    if a.min_props > 0:  # why: too few or too many keys violates the shape whatever the values are
        out.append(ObjShape(max_props=a.min_props - 1, origin=a.origin))
    if a.max_props is not None:
        out.append(ObjShape(min_props=a.max_props + 1, origin=a.origin))
    if a.names != S_ALL:  # why: some key is outside propertyNames
        out.append(ObjShape(some=(Witness(s_not(a.names), TOP),)))
    for key, expr, required in a.entries:
        if required:
            out.append(ObjShape(((key, BOTTOM, False),)))
        if expr != TOP:
            out.append(ObjShape(((key, not_(expr), True),)))
    declared = s_not(SLits(frozenset(k for k, _, _ in a.entries))) if a.entries else S_ALL
    for keys, expr in a.regions():  # why: some undeclared key of a patternProperties/additional region fails it
        if expr != TOP:
            out.append(ObjShape(some=(Witness(s_and(keys, declared), not_(expr)),)))
    for w in a.some:  # why: "no key of the language has such a value" is a key region of its own
        out.append(ObjShape(patterns=((w.keys, not_(w.value)),)))
    return out


def stamp_witnesses(shapes: tuple[ObjShape, ...], origin: str) -> tuple[ObjShape, ...]:
    """The shapes with `origin` on the witnesses that have none (a complement names its keyword later)."""
    return tuple(replace(s, some=tuple(w if w.origin else replace(w, origin=origin) for w in s.some))
                 if any(not w.origin for w in s.some) else s for s in shapes)


def shape_product(left, right, meet):
    if len(left) * len(right) > MAX_SHAPES * 4:
        raise too_complex("too many alternative object or array shapes")
    out = []
    for x, y in itertools.product(left, right):
        shape = meet(x, y)
        if not shape.trivially_empty() and shape not in out:
            out.append(shape)
    if len(out) > MAX_SHAPES:
        raise too_complex("too many alternative object or array shapes")
    return tuple(out)


def shapes_not(shapes, negate, everything):
    acc = (everything,)
    for shape in shapes:
        acc = shape_product(acc, tuple(negate(shape)), array_and if isinstance(everything, ArrShape) else object_and)
    return acc


# ---- value sets ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ValueSet:
    """A set of JSON values, by type. Build with `top()`/`bottom()` and the operations."""

    null: bool
    bools: frozenset[bool]
    ints: NumSet
    fracs: NumSet
    strings: SExpr
    arrays: tuple[ArrShape, ...]
    objects: tuple[ObjShape, ...]
    steps: intsteps.Pieces = ()  # more integers: (interval set, residue classes) pieces, from multipleOf

    @staticmethod
    def top() -> ValueSet:
        return ValueSet(True, frozenset((True, False)), NumSet.everything(True), NumSet.everything(False),
                        S_ALL, (ArrShape(),), (ObjShape(),))

    @staticmethod
    def bottom() -> ValueSet:
        return ValueSet(False, frozenset(), NumSet.nothing(True), NumSet.nothing(False), S_NONE, (), ())

    def is_top(self) -> bool:
        return self == ValueSet.top()

    def intersect(self, other: ValueSet, member=None) -> ValueSet:
        ints, steps = intsteps.intersect(self.ints, self.steps, other.ints, other.steps)
        return ValueSet(self.null and other.null, self.bools & other.bools, ints,
                        self.fracs.intersect(other.fracs), s_and(self.strings, other.strings, member=member),
                        shape_product(self.arrays, other.arrays, array_and),
                        shape_product(self.objects, other.objects, object_and), steps)

    def union(self, other: ValueSet) -> ValueSet:
        ints, steps = intsteps.union(self.ints, self.steps, other.ints, other.steps)
        return ValueSet(self.null or other.null, self.bools | other.bools, ints,
                        self.fracs.union(other.fracs), s_or(self.strings, other.strings),
                        _dedupe(self.arrays + other.arrays), _dedupe(self.objects + other.objects), steps)

    def complement(self) -> ValueSet:
        """Every JSON value not in this set; raises NotRepresentable where the shapes cannot say it."""
        ints, steps = intsteps.complement(self.ints, self.steps)
        return ValueSet(not self.null, frozenset((True, False)) - self.bools, ints,
                        self.fracs.complement(), s_not(self.strings),
                        shapes_not(self.arrays, array_not, ArrShape()),
                        shapes_not(self.objects, object_not, ObjShape()), steps)


def _dedupe(shapes: tuple) -> tuple:
    out: list = []
    for shape in shapes:
        if shape not in out:
            out.append(shape)
    if len(out) > MAX_SHAPES:
        raise too_complex("too many alternative object or array shapes")
    return tuple(out)
