"""String constraints (length, pattern, format, literals, and their boolean combinations) → regex trees.

The common cases are built directly: a length range is a counted repetition, a pattern whose own length
range already fits needs nothing more, `[a-z]+` with a maximum length becomes `[a-z]{1,n}`. What remains
(an unanchored pattern with a length cap, two patterns, a negated pattern) goes through automata: product
or complement of DFAs, then back to a regex by state elimination, within a state budget.
"""

from __future__ import annotations

import collections
import functools
import re

from sprig.grammar.errors import too_complex
from sprig.grammar.regex import charset, fsm, ir
from sprig.grammar.regex.char_classes import Dialect
from sprig.grammar.regex.ir import Flavor
from sprig.grammar.regex.pattern import regex_language
from sprig.grammar.schema import labels
from sprig.grammar.schema.formats import format_language
from sprig.grammar.schema.values import (
    S_ALL,
    S_NONE,
    Expr,
    ObjShape,
    SAnd,
    SExpr,
    SFormat,
    SLen,
    SLits,
    SNot,
    SOr,
    SPattern,
    s_and,
    s_not,
    use_key_membership,
)

ANY_CHAR = ir.chars(charset.ALL_CHARS)
MAX_PATTERN_STATES = 4000
MAX_SPLIT = 256  # why: splitting "x* y" on the count of x is only worth it for modest length caps


@functools.lru_cache(maxsize=1024)
def pattern_language(pattern: str) -> ir.Node:
    """The strings an ECMA-262 `pattern` matches somewhere inside (JSON Schema's search semantics).

    Raises GrammarTooComplex if its automaton would exceed the state budget (`.*a[ab]{40}` would).
    """
    node = regex_language(pattern, Dialect.ECMA, search=True)
    fsm.determinize(node, MAX_PATTERN_STATES)
    return node


def atom_language(atom: SExpr) -> ir.Node:
    if isinstance(atom, SLen):
        return ir.rep(ANY_CHAR, atom.lo, atom.hi)
    if isinstance(atom, SPattern):
        return pattern_language(atom.pattern)
    if isinstance(atom, SFormat):
        return format_language(atom.name)
    assert isinstance(atom, SLits)
    return ir.alt(*(ir.lit(v) for v in sorted(atom.values)))


@functools.lru_cache(maxsize=1024)  # why: string constraints recur across the schemas a worker compiles
def string_language(expr: SExpr) -> ir.Node:
    """The set of string values `expr` allows, as a regex tree over characters."""
    if expr == S_ALL:
        return ir.star(ANY_CHAR)
    if expr == S_NONE:
        return ir.NEVER
    if isinstance(expr, SAnd):
        direct = _direct_and(expr)
        if direct is not None:
            return direct
    elif isinstance(expr, SOr):
        return ir.alt(*(string_language(i) for i in expr.items))
    elif not isinstance(expr, SNot):
        return atom_language(expr)
    return fsm.to_ir(_dfa(expr))


def intersection_parts(expr: SExpr) -> list[ir.Node] | None:
    """The parts of a conjunction the direct path cannot build (format or pattern with a length, several
    patterns), for a grammar engine to intersect lazily; None where one regex is built here instead."""
    if not isinstance(expr, SAnd) or len(expr.items) < 2 or _direct_and(expr) is not None:
        return None
    if any(isinstance(i, SNot | SAnd | SOr) for i in expr.items):
        return None  # why: a complement needs the automaton anyway
    return [ir.rep(ANY_CHAR, i.lo, i.hi) if isinstance(i, SLen) else atom_language(i)
            for i in sorted(expr.items, key=repr)]


MAX_LAZY_CLAUSES = 16  # why: each clause of a lazily built string constraint is one lexeme


def lazy_clauses(expr: SExpr) -> list[tuple[list[ir.Node], list[ir.Node]]]:
    """`expr` as a union of (parts every string matches, parts it matches none of), its non-empty clauses
    only, for a grammar engine to intersect and negate lazily where one regex would be too large (a format
    beside its own complement in a `oneOf`); raises too_complex where the clauses do not fit."""
    out = []
    for clause in _dnf(expr, False):
        if any(isinstance(a, SFormat) and a.name == "hostname" for a in clause[1]):
            raise too_complex("a negated hostname format is decided beside the regex, not in a lexeme")
        pos = [_atom_node(a) for a in sorted(clause[0], key=repr)] or [ir.star(ANY_CHAR)]
        neg = [_atom_node(a) for a in sorted(clause[1], key=repr)]
        if not intersection_is_empty(pos, neg):
            out.append((pos, neg))
    return out


def _atom_node(atom: SExpr) -> ir.Node:
    return ir.rep(ANY_CHAR, atom.lo, atom.hi) if isinstance(atom, SLen) else atom_language(atom)


def _dnf(expr: SExpr, negated: bool) -> list[tuple[frozenset[SExpr], frozenset[SExpr]]]:
    """Clauses (atoms that hold, atoms that fail) whose union is `expr` (its complement when `negated`)."""
    if isinstance(expr, SNot):
        return _dnf(expr.item, not negated)
    if isinstance(expr, SAnd | SOr):
        parts = [_dnf(i, negated) for i in sorted(expr.items, key=repr)]
        if isinstance(expr, SOr) != negated:  # a union
            return [c for p in parts for c in p]
        acc: list[tuple[frozenset[SExpr], frozenset[SExpr]]] = [(frozenset(), frozenset())]
        for p in parts:
            acc = [(a[0] | b[0], a[1] | b[1]) for a in acc for b in p]
            if len(acc) > MAX_LAZY_CLAUSES:
                raise too_complex("a combined string constraint has too many alternatives")
        return acc
    return [(frozenset(), frozenset((expr,)))] if negated else [(frozenset((expr,)), frozenset())]


@functools.lru_cache(maxsize=256)  # why: formats recur in every schema; their automata take 10-60 ms each
def determinized(node: ir.Node) -> fsm.Dfa:
    return fsm.determinize(node)


def intersection_is_empty(parts: list[ir.Node], excluded: tuple[ir.Node, ...] | list[ir.Node] = (),
                          budget: int = 200_000) -> bool:
    """Whether no string is in every part and in none of `excluded`: a breadth-first search of the product,
    stopping at a witness (an excluded automaton that dies no longer excludes anything)."""
    dfas = [determinized(p) for p in parts]
    outs = [determinized(p) for p in excluded]
    n = len(dfas)
    start = tuple(0 for _ in dfas + outs)
    seen, queue = {start}, collections.deque([start])
    while queue:
        states = queue.popleft()
        if (all(d.accept[q] for d, q in zip(dfas, states, strict=False))
                and not any(q >= 0 and d.accept[q] for d, q in zip(outs, states[n:], strict=True))):
            return False
        cuts = sorted({x for d, q in zip(dfas + outs, states, strict=True) if q >= 0
                       for lo, hi, _ in d.trans[q] for x in (lo, hi + 1)})
        for lo in cuts[:-1]:
            nxt = tuple(d.step(q, lo) if q >= 0 else -1 for d, q in zip(dfas + outs, states, strict=True))
            if min(nxt[:n], default=0) >= 0 and nxt not in seen:
                if len(seen) >= budget:
                    raise too_complex("a combined string constraint is too large to check")
                seen.add(nxt)
                queue.append(nxt)
    return True


def _direct_and(expr: SAnd) -> ir.Node | None:
    lens = [i for i in expr.items if isinstance(i, SLen)]
    rest = [i for i in expr.items if not isinstance(i, SLen)]
    if len(rest) != 1 or isinstance(rest[0], SNot | SAnd | SOr):
        return None
    lo, hi = (lens[0].lo, lens[0].hi) if lens else (0, None)
    return restrict_length(atom_language(rest[0]), lo, hi)


def restrict_length(node: ir.Node, lo: int, hi: int | None) -> ir.Node | None:
    """node ∩ (strings of lo..hi characters) built structurally, or None when that needs an automaton."""
    if node.min_len >= lo and (hi is None or (node.max_len is not None and node.max_len <= hi)):
        return node
    if hi is not None and node.min_len > hi or (node.max_len is not None and node.max_len < lo):
        return ir.NEVER
    if isinstance(node, ir.Alt):
        parts = [restrict_length(i, lo, hi) for i in node.items]
        return None if any(p is None for p in parts) else ir.alt(*parts)  # type: ignore[arg-type]
    if isinstance(node, ir.Rep) and node.item.min_len == node.item.max_len and node.item.min_len > 0:
        k = node.item.min_len
        top = [x for x in (node.hi, None if hi is None else hi // k) if x is not None]
        return ir.rep(node.item, max(node.lo, -(-lo // k)), min(top) if top else None)
    if isinstance(node, ir.Seq):
        return _restrict_seq(node, lo, hi)
    return None


def _restrict_seq(node: ir.Seq, lo: int, hi: int | None) -> ir.Node | None:
    variable = [i for i, x in enumerate(node.items) if x.min_len != x.max_len]
    if len(variable) == 1:
        fixed = sum(x.min_len for x in node.items if x.min_len == x.max_len)
        i = variable[0]
        inner = restrict_length(node.items[i], max(lo - fixed, 0), None if hi is None else hi - fixed)
        return None if inner is None else ir.seq(*node.items[:i], inner, *node.items[i + 1:])
    head = node.items[0]
    if (hi is None or hi > MAX_SPLIT or not isinstance(head, ir.Rep) or head.hi is not None
            or head.item.min_len != 1 or head.item.max_len != 1):
        return None
    rest = ir.seq(*node.items[1:])
    parts = []
    for n in range(head.lo, hi - rest.min_len + 1):  # why: split on how many characters the leading x* takes
        tail = restrict_length(rest, max(lo - n, 0), hi - n)
        if tail is None:
            return None
        parts.append(ir.seq(ir.rep(head.item, n, n), tail))
    return ir.alt(*parts)


def _dfa(expr: SExpr) -> fsm.Dfa:
    if isinstance(expr, SAnd):
        items = sorted(expr.items, key=repr)
        acc = _dfa(items[0]) if items else fsm.determinize(ir.star(ANY_CHAR))
        for item in items[1:]:
            acc = fsm.product(acc, _dfa(item), "and")
        return acc
    if isinstance(expr, SOr):
        items = sorted(expr.items, key=repr)
        acc = _dfa(items[0]) if items else fsm.determinize(ir.NEVER)
        for item in items[1:]:
            acc = fsm.product(acc, _dfa(item), "or")
        return acc
    if isinstance(expr, SNot):
        return fsm.complement(_dfa(expr.item))
    return fsm.minimize(fsm.determinize(atom_language(expr)))


def is_empty(expr: SExpr) -> bool:
    """Whether no string satisfies `expr` (automaton emptiness when it is not obvious)."""
    if expr == S_NONE:
        return True
    if isinstance(expr, SLits):
        return not expr.values
    if expr == S_ALL:
        return False
    if isinstance(expr, SLen | SPattern | SFormat):
        return ir.is_never(atom_language(expr))
    return _dfa(expr).is_empty()


@functools.lru_cache(maxsize=2048)
def _python_regex(atom: SExpr) -> re.Pattern[str]:
    return re.compile(atom_language(atom).render(Flavor.PYTHON), re.DOTALL)


def member(expr: SExpr, text: str) -> bool:
    """Whether the string value `text` satisfies `expr`."""
    if isinstance(expr, SAnd):
        return all(member(i, text) for i in expr.items)
    if isinstance(expr, SOr):
        return any(member(i, text) for i in expr.items)
    if isinstance(expr, SNot):
        return not member(expr.item, text)
    if isinstance(expr, SLits):
        return text in expr.values
    if isinstance(expr, SLen):
        return len(text) >= expr.lo and (expr.hi is None or len(text) <= expr.hi)
    if isinstance(expr, SFormat) and expr.name == "hostname" and not labels.host_labels_valid(text):
        return False  # why: A-labels are decided beside the regex (grammar/schema/labels.py)
    return _python_regex(expr).fullmatch(text) is not None


def undeclared_keys(shape: ObjShape) -> list[tuple[ir.Node, Expr]]:
    """The string languages of an object shape's undeclared keys, each with the value schema it takes."""
    declared = [k for k, _, _ in shape.entries]
    if not shape.patterns and shape.names == S_ALL:
        return [(not_in(declared) if declared else ir.star(ANY_CHAR), shape.additional)]
    excluded = s_not(SLits(frozenset(declared))) if declared else S_ALL
    return [(string_language(s_and(lang, shape.names, excluded)), expr) for lang, expr in shape.regions()]


def not_in(keys: list[str]) -> ir.Node:
    """Every string except the given ones (a trie, complemented node by node)."""
    trie: dict = {}
    for key in keys:
        node = trie
        for c in key:
            node = node.setdefault(c, {})
        node[None] = True
    return _not_in_trie(trie)


def _not_in_trie(node: dict) -> ir.Node:
    children = sorted(c for c in node if c is not None)
    if not children and None not in node:
        return ir.star(ANY_CHAR)
    parts = [] if None in node else [ir.EMPTY]
    other = charset.difference(charset.ALL_CHARS, charset.of_chars("".join(children)))
    parts.append(ir.seq(ir.chars(other), ir.star(ANY_CHAR)))
    parts.extend(ir.seq(ir.char(c), _not_in_trie(node[c])) for c in children)
    return ir.alt(*parts)


use_key_membership(member)  # why: values.py cannot import this module (it is imported by it)
