"""Small finite domains of JSON values, for `uniqueItems`: one rule per set of values used (2^n rules)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

from sprig.grammar.regex import ir
from sprig.grammar.schema.evaluator import Evaluator, canonical
from sprig.grammar.schema.json_text import Punctuation, dumps
from sprig.grammar.schema.values import S_NONE, SLits, ValueSet

MAX_UNIQUE_DOMAIN = 10  # why: uniqueItems tracks the set of values used: 2^n rules


def finite_domain(vs: ValueSet) -> list[str] | None:
    """The canonical JSON texts of a value set's members when it is a small set of scalars, else None."""
    if vs.arrays or vs.objects or vs.steps:
        return None
    out = ["null"] * vs.null + [json.dumps(b) for b in sorted(vs.bools)]
    for numbers in (vs.ints, vs.fracs):
        for iv in numbers.intervals:
            if iv.lo is None or iv.hi is None or iv.hi - iv.lo > MAX_UNIQUE_DOMAIN:
                return None
            if numbers.integral:
                out += [str(n) for n in range(int(iv.lo), int(iv.hi) + 1)]
            elif iv.lo == iv.hi:
                out.append(canonical(iv.lo))
            else:
                return None
    if vs.strings != S_NONE:
        if not isinstance(vs.strings, SLits):
            return None
        out += [dumps(v) for v in sorted(vs.strings.values)]
    return out


def unique_domain(ev: Evaluator, p: Punctuation, vs: ValueSet) -> list[tuple[object, ir.Node]] | None:
    """The distinct values of a small finite set, each keyed by its identity and spelled one way: scalars as
    canonical literals, else closed objects (`object_domain`); None if neither."""
    scalars = finite_domain(vs)
    if scalars is not None:
        return [(text, ir.lit(text)) for text in scalars]
    return object_domain(ev, p, vs)


def object_domain(ev: Evaluator, p: Punctuation, vs: ValueSet) -> list[tuple[object, ir.Node]] | None:
    """Each value of a set of closed objects with finitely many scalar values per key, spelled in
    declared order (one spelling per distinct object, so "used" masks count values); None if not so."""
    if not vs.objects or replace(vs, objects=()) != ValueSet.bottom():
        return None
    out: dict[object, ir.Node] = {}
    for shape in vs.objects:
        if (shape.patterns or shape.some or shape.counted()
                or ev.eval_child(shape.additional, ()) != ValueSet.bottom()):
            return None
        options: list[list[tuple[str, str] | None]] = []
        for key, expr, required in shape.entries:
            values = finite_domain(ev.eval_child(expr, ()))
            if values is None:
                return None
            options.append([(key, v) for v in values] + ([] if required else [None]))
        if math.prod(len(o) for o in options) > MAX_UNIQUE_DOMAIN:
            return None
        for combo in itertools.product(*options):
            pairs = [c for c in combo if c is not None]
            members = [ir.seq(ir.lit(dumps(k)), p.colon, ir.lit(v)) for k, v in pairs]
            body = [x for i, m in enumerate(members) for x in ((p.comma, m) if i else (m,))]
            out.setdefault(frozenset(pairs), ir.seq(p.open_object, *body, p.close_object))
    return list(out.items())
