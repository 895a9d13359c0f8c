"""Integers under `multipleOf`: interval sets combined with residue classes, and their grammar.

A value set's integers are `plain ∪ ⋃ (A_i ∩ M_i)`: `plain` and each `A_i` are interval sets (`NumSet`),
each `M_i` a `Periodic` set (residues modulo m). Intersection and union distribute exactly; a complement
expands `¬plain ∩ ⋂ (¬A_i ∪ ¬M_i)` piece by piece. A multiple of an integer is an integer, and an integer
is a multiple of p/q (lowest terms) exactly when p divides it, so every `multipleOf` constrains integers
this way; non-integer multiples of a fractional step are refused by the evaluator.

The grammar of one piece is the product of the interval's decimal DFA with the running remainder of the
digits read so far (a right-linear grammar over one-character lexemes, so greedy lexing changes nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sprig.grammar.errors import too_complex
from sprig.grammar.llg.cfg import EMPTY, NEVER, Grammar, Sym, Term, cat, choice, lex
from sprig.grammar.regex import charset, fsm, ir
from sprig.grammar.schema.numbers import NumSet, numbers_regex

MAX_MODULUS = 10_000
MAX_PIECES = 64  # why: complements multiply pieces
MAX_STEP_STATES = 30_000  # why: interval states x remainders x sign, one grammar rule each


@dataclass(frozen=True)
class Periodic:
    """The integers whose remainder modulo `modulus` is in `residues`."""

    modulus: int
    residues: frozenset[int]
    origin: str = field(default="", compare=False)  # the multipleOf keyword, for refusals

    def intersect(self, other: Periodic) -> Periodic:
        m = self.modulus * other.modulus // math.gcd(self.modulus, other.modulus)
        if m > MAX_MODULUS:
            raise too_complex(f"multipleOf steps combine to a period over {MAX_MODULUS}", self.origin or None)
        keep = frozenset(r for r in range(m) if r % self.modulus in self.residues
                         and r % other.modulus in other.residues)
        return Periodic(m, keep, self.origin or other.origin)

    def complement(self) -> Periodic:
        return Periodic(self.modulus, frozenset(range(self.modulus)) - self.residues, self.origin)

    def contains(self, n: int) -> bool:
        return n % self.modulus in self.residues

    def is_everything(self) -> bool:
        return len(self.residues) == self.modulus


Pieces = tuple[tuple[NumSet, Periodic], ...]
EVERY = NumSet.everything(True)


def multiples(step: int, origin: str) -> Pieces:
    return ((EVERY, Periodic(step, frozenset((0,)), origin)),)


def clean(plain: NumSet, pieces: list[tuple[NumSet, Periodic]]) -> tuple[NumSet, Pieces]:
    """Drop empty pieces, fold periodic-free ones into `plain`, deduplicate, bound the count."""
    out: list[tuple[NumSet, Periodic]] = []
    for interval, step in pieces:
        if interval.is_empty() or not step.residues or plain.union(interval) == plain:
            continue
        if step.is_everything():
            plain = plain.union(interval)
        elif (interval, step) not in out:
            out.append((interval, step))
    if len(out) > MAX_PIECES:
        raise too_complex("too many multipleOf combinations", out[0][1].origin or None)
    return plain, tuple(out)


def intersect(a: NumSet, pa: Pieces, b: NumSet, pb: Pieces) -> tuple[NumSet, Pieces]:
    pieces = [(a.intersect(x), m) for x, m in pb] + [(x.intersect(b), m) for x, m in pa]
    pieces += [(x.intersect(y), m.intersect(n)) for x, m in pa for y, n in pb]
    return clean(a.intersect(b), pieces)


def union(a: NumSet, pa: Pieces, b: NumSet, pb: Pieces) -> tuple[NumSet, Pieces]:
    return clean(a.union(b), list(pa + pb))


def complement(plain: NumSet, pieces: Pieces) -> tuple[NumSet, Pieces]:
    acc: tuple[NumSet, Pieces] = (plain.complement(), ())
    for interval, step in pieces:  # why: S ∩ (¬A ∪ ¬M) = (S ∩ ¬A) ∪ (S ∩ ¬M)
        outside = intersect(*acc, interval.complement(), ())
        off_step = intersect(*acc, NumSet.nothing(True), ((EVERY, step.complement()),))
        acc = union(*outside, *off_step)
    return acc


def contains(plain: NumSet, pieces: Pieces, n: int) -> bool:
    from decimal import Decimal

    d = Decimal(n)
    return plain.contains(d) or any(x.contains(d) and m.contains(n) for x, m in pieces)


def piece_grammar(grammar: Grammar, name: str, interval: NumSet, step: Periodic) -> Term:
    """Rules for the decimal integers in `interval` ∩ `step`; returns the start symbol.

    The product automaton is minimized before it becomes rules: a step of 100 only needs the last two
    digits, not 100 remainders per interval state.
    """
    node = numbers_regex(interval, NumSet.nothing(False))
    if ir.is_never(node):
        return NEVER
    dfa = fsm.determinize(node)
    alphabet = sorted({cp for edges in dfa.trans for lo, hi, _ in edges for cp in range(lo, hi + 1)})
    rows, accept = _with_remainders(dfa, step, alphabet)
    cls = _equivalent_states(rows, accept)
    names = {c: f"{name}_{c}" for c in cls}
    done: set[int] = set()
    for s, row in enumerate(rows):
        if cls[s] in done:
            continue
        done.add(cls[s])
        by_target: dict[int, list[tuple[int, int]]] = {}
        for cp, target in zip(alphabet, row, strict=True):
            if target >= 0:
                by_target.setdefault(cls[target], []).append((cp, cp))
        options = [EMPTY] if accept[s] else []
        options += [cat(lex(ir.chars(charset.normalize(ranges))), Sym(names[t])) for t, ranges in by_target.items()]
        grammar.add(names[cls[s]], choice(*options) if options else NEVER)  # why: dead states are pruned later
    return Sym(names[cls[0]])


def _with_remainders(dfa: fsm.Dfa, step: Periodic, alphabet: list[int]) -> tuple[list[list[int]], list[bool]]:
    """The decimal automaton × the running remainder of the digits read so far (and the sign), as one
    row of targets per state over `alphabet` (-1: no move), and which states accept."""
    m = step.modulus
    ids: dict[tuple[int, int, bool], int] = {(0, 0, False): 0}
    order = [(0, 0, False)]
    rows: list[list[int]] = []
    for q, v, neg in order:  # why: grows while it is walked (breadth-first)
        row = []
        for cp in alphabet:
            target = dfa.step(q, cp)
            if target < 0:
                row.append(-1)
                continue
            after = (target, v, True) if cp == 0x2D else (target, (v * 10 + cp - 0x30) % m, neg)
            if after not in ids:
                if len(order) >= MAX_STEP_STATES:
                    raise too_complex(f"a multipleOf of {m} over this range needs too many states", step.origin or None)
                ids[after] = len(order)
                order.append(after)
            row.append(ids[after])
        rows.append(row)
    return rows, [dfa.accept[q] and ((-v if neg else v) % m) in step.residues for q, v, neg in order]


def _equivalent_states(rows: list[list[int]], accept: list[bool]) -> list[int]:
    """A class per state, equal for states that accept the same suffixes (Moore refinement, vectorized:
    a step of 100 over an open range is ~1,400 states and ~15 rounds)."""
    import numpy as np  # why: only here; most schemas never reach multipleOf

    table = np.asarray(rows, dtype=np.int64)
    cls = np.asarray(accept, dtype=np.int64)
    count = len(set(accept))
    while True:
        with_missing = np.append(cls, -1)  # why: a missing move (-1) reads the last entry, a class of its own
        signature = np.column_stack([cls, with_missing[table]])
        order = np.lexsort(signature.T[::-1])
        ranked = signature[order]
        starts = np.concatenate([[0], np.any(ranked[1:] != ranked[:-1], axis=1).astype(np.int64)])
        new = np.empty_like(cls)
        new[order] = np.cumsum(starts)
        if int(new.max()) + 1 == count:
            return [int(c) for c in new]
        cls, count = new, int(new.max()) + 1
