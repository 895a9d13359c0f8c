"""`oneOf`: exactly one branch matches.

Per type: null, booleans and numbers count exactly; strings become "this branch and none of the others"
expressions. Arrays and objects first check which branches can overlap at all (their shapes intersect in a
non-empty set); if none do, oneOf is anyOf. Otherwise each branch is intersected with the complement of the
branches it overlaps, which the shape algebra can do when the overlap is in required keys, property values,
prefix items and lengths; other overlaps are refused rather than approximated.
"""

from __future__ import annotations

import functools

from sprig.grammar.errors import GrammarTooComplex, unsupported
from sprig.grammar.schema import intsteps, strings
from sprig.grammar.schema.numbers import NumSet
from sprig.grammar.schema.values import (
    S_NONE,
    ArrShape,
    NotRepresentable,
    ObjShape,
    SExpr,
    ValueSet,
    array_and,
    array_not,
    object_and,
    object_not,
    s_and,
    s_not,
    s_or,
    shape_product,
    shapes_not,
    stamp_witnesses,
)

EMPTINESS_DEPTH = 3  # why: deeper than this, a shape is assumed non-empty (exactness kept by complementing)


def exactly_one(ev, sets: list[ValueSet], path: tuple[str, ...], origin: str) -> ValueSet:
    null = sum(s.null for s in sets) == 1
    bools = frozenset(b for b in (True, False) if sum(b in s.bools for s in sets) == 1)
    try:
        arrays = _one_shapes(ev, [s.arrays for s in sets], path, array_and, array_not, ArrShape())
        plain = functools.partial(object_not, witnesses=False)
        try:
            objects = _one_shapes(ev, [s.objects for s in sets], path, object_and,
                                  object_not if ev.key_witnesses else plain, ObjShape())
        except GrammarTooComplex:  # why: complemented key rules multiplied the shapes; refuse by the rule instead
            if not ev.key_witnesses:
                raise
            objects = _one_shapes(ev, [s.objects for s in sets], path, object_and, plain, ObjShape())
        objects = stamp_witnesses(objects, origin)
    except NotRepresentable as exc:
        raise unsupported("oneOf", origin, f"overlapping branches differ in '{exc}'") from None
    ints, steps = _one_ints(sets)
    return ValueSet(null, bools, ints, _one_nums([s.fracs for s in sets]),
                    _one_strings([s.strings for s in sets]), arrays, objects, steps)


def _one_ints(sets: list[ValueSet]) -> tuple[NumSet, intsteps.Pieces]:
    """Integers in exactly one branch, multipleOf pieces included."""
    acc: tuple[NumSet, intsteps.Pieces] = (NumSet.nothing(True), ())
    for i, vs in enumerate(sets):
        part: tuple[NumSet, intsteps.Pieces] = (vs.ints, vs.steps)
        for j, other in enumerate(sets):
            if i != j:
                part = intsteps.intersect(*part, *intsteps.complement(other.ints, other.steps))
        acc = intsteps.union(*acc, *part)
    return acc


def _one_nums(parts: list[NumSet]) -> NumSet:
    out = NumSet.nothing(parts[0].integral)
    for i, part in enumerate(parts):
        for j, other in enumerate(parts):
            if i != j:
                part = part.intersect(other.complement())
        out = out.union(part)
    return out


def _one_strings(parts: list[SExpr]) -> SExpr:
    live = [p for p in parts if p != S_NONE]
    if len(live) <= 1:
        return live[0] if live else S_NONE
    return s_or(*(s_and(p, *(s_not(q) for j, q in enumerate(live) if j != i), member=strings.member)
                  for i, p in enumerate(live)))


def _one_shapes(ev, parts, path, meet, negate, everything) -> tuple:
    live = [(i, p) for i, p in enumerate(parts) if p]
    if len(live) <= 1:
        return live[0][1] if live else ()
    overlaps = {(i, j) for i, p in live for j, q in live
                if i < j and not all(shape_empty(ev, s, path) for s in shape_product(p, q, meet))}
    result: list = []
    for i, shapes in live:
        acc = shapes
        for j, other in live:
            if (min(i, j), max(i, j)) in overlaps:
                acc = tuple(s for s in shape_product(acc, shapes_not(other, negate, everything), meet)
                            if not shape_empty(ev, s, path))
        result.extend(s for s in acc if s not in result)
    return tuple(result)


def shape_empty(ev, shape, path: tuple[str, ...], depth: int = 0) -> bool:
    """Whether a shape allows no value (False when unsure, which keeps callers exact but larger)."""
    if shape.trivially_empty():
        return True
    if depth >= EMPTINESS_DEPTH:
        return False
    if isinstance(shape, ObjShape):
        required = [expr for _, expr, req in shape.entries if req]
    else:
        required = [shape.at(i) for i in range(min(shape.min_items, len(shape.prefix) + 1))]
    return any(set_empty(ev, ev.eval_child(expr, path), path, depth + 1) for expr in required)


def set_empty(ev, vs: ValueSet, path: tuple[str, ...], depth: int = 0) -> bool:
    if vs.null or vs.bools or not vs.ints.is_empty() or not vs.fracs.is_empty() or vs.steps:
        return False
    try:
        if not strings.is_empty(vs.strings):
            return False
    except GrammarTooComplex:
        return False
    return all(shape_empty(ev, s, path, depth) for s in vs.arrays + vs.objects)
