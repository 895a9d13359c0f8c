"""Sets of JSON numbers and the regexes that spell exactly their members.

JSON Schema compares numbers by value: `1`, `1.0` and `1.00` are the same integer. A number set is kept as
two interval sets, the integers and the non-integers, which makes `type: integer`, bounds, `enum` and
`oneOf`/`not` simple set algebra. Emission writes decimal notation (`-?int(.frac)?`): each integer as its
canonical digits (never `73.0`: strict readers take that for a float); each non-integer with a fraction that has a non-zero digit.
Exponents are written only for the unconstrained `number` (every JSON number is then valid). Freely chosen
digits are counted (see FREE_INT_DIGITS). The grammar is thereby a subset of the valid spellings, never a
superset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from sprig.grammar.regex import ir

# Digits the grammar chooses freely (where no bound dictates them) are counted, so that every generated
# number means the same as an IEEE double (what JSON parsers and `jsonschema` read) and a sampling model
# cannot write digits forever: free integers get at most 15 digits, the integer part of a free non-integer
# at most 9 and a free fraction at most 6 (<= 15 significant digits: the double keeps them all), exponents 2.
FREE_INT_DIGITS = 15
FREE_FRAC_INT_DIGITS = 9
FREE_FRAC_DIGITS = 6
MAX_EXPONENT_DIGITS = 2

DIGIT = ir.chars(((48, 57),))
NONZERO = ir.chars(((49, 57),))
ANY_DIGITS = ir.rep(DIGIT, 0, FREE_FRAC_DIGITS)
NONZERO_FRACTION = ir.alt(*(ir.seq(ir.rep(ir.char("0"), k, k), NONZERO, ir.rep(DIGIT, 0, FREE_FRAC_DIGITS - 1 - k))
                            for k in range(FREE_FRAC_DIGITS)))  # digits with at least one non-zero
INTEGER_FRACTION = ir.EMPTY  # why: 1 == 1.0, and "1" is what a strict JSON reader takes for an integer
JSON_NUMBER = ir.seq(ir.opt(ir.char("-")),
                     ir.alt(ir.char("0"), ir.seq(NONZERO, ir.rep(DIGIT, 0, FREE_INT_DIGITS - 1))),
                     ir.opt(ir.seq(ir.char("."), ir.rep(DIGIT, 1, FREE_FRAC_DIGITS))),
                     ir.opt(ir.seq(ir.chars(((69, 69), (101, 101))), ir.opt(ir.chars(((43, 43), (45, 45)))),
                                   ir.rep(DIGIT, 1, MAX_EXPONENT_DIGITS))))


@dataclass(frozen=True)
class Interval:
    """lo..hi with inclusive flags; None is infinity. Integer sets keep integer, inclusive ends."""

    lo: Decimal | None
    lo_incl: bool
    hi: Decimal | None
    hi_incl: bool


@dataclass(frozen=True)
class NumSet:
    """A union of disjoint intervals, sorted; `integral` sets hold only integers."""

    intervals: tuple[Interval, ...]
    integral: bool

    @staticmethod
    def everything(integral: bool) -> NumSet:
        return NumSet((Interval(None, False, None, False),), integral)

    @staticmethod
    def nothing(integral: bool) -> NumSet:
        return NumSet((), integral)

    @staticmethod
    def point(value: Decimal, integral: bool) -> NumSet:
        return NumSet((Interval(value, True, value, True),), integral)

    @staticmethod
    def points(values: list[Decimal], integral: bool) -> NumSet:
        return _normalize([Interval(v, True, v, True) for v in values], integral)

    @staticmethod
    def at_least(value: Decimal, inclusive: bool, integral: bool) -> NumSet:
        return _normalize([Interval(value, inclusive, None, False)], integral)

    @staticmethod
    def at_most(value: Decimal, inclusive: bool, integral: bool) -> NumSet:
        return _normalize([Interval(None, False, value, inclusive)], integral)

    def is_empty(self) -> bool:
        return not self.intervals

    def is_everything(self) -> bool:
        return self.intervals == (Interval(None, False, None, False),)

    def union(self, other: NumSet) -> NumSet:
        return _normalize(list(self.intervals + other.intervals), self.integral)

    def intersect(self, other: NumSet) -> NumSet:
        if self.integral == other.integral and (other.is_everything() or self.is_empty()):
            return _normalize(list(self.intervals), self.integral)  # why: one normalization, not four
        if self.integral == other.integral and (self.is_everything() or other.is_empty()):
            return _normalize(list(other.intervals), self.integral)
        return self.complement().union(other.complement()).complement()

    def complement(self) -> NumSet:
        out: list[Interval] = []
        lo, lo_incl = None, False
        for iv in self.intervals:
            if iv.lo is not None:
                out.append(Interval(lo, lo_incl, iv.lo, not iv.lo_incl))
            if iv.hi is None:
                return _normalize(out, self.integral)
            lo, lo_incl = iv.hi, not iv.hi_incl
        out.append(Interval(lo, lo_incl, None, False))
        return _normalize(out, self.integral)

    def contains(self, value: Decimal) -> bool:
        return any(_inside(iv, value) for iv in self.intervals)


def _inside(iv: Interval, v: Decimal) -> bool:
    above = iv.lo is None or v > iv.lo or (iv.lo_incl and v == iv.lo)
    below = iv.hi is None or v < iv.hi or (iv.hi_incl and v == iv.hi)
    return above and below


def _normalize(intervals: list[Interval], integral: bool) -> NumSet:
    cleaned = [iv for iv in (_integral(iv) if integral else iv for iv in intervals) if not _empty(iv)]
    cleaned.sort(key=lambda iv: (iv.lo is not None, iv.lo or 0, not iv.lo_incl))
    out: list[Interval] = []
    for iv in cleaned:
        if out and _touches(out[-1], iv, integral):
            last = out[-1]
            hi, hi_incl = _max_end(last, iv)
            out[-1] = Interval(last.lo, last.lo_incl, hi, hi_incl)
        else:
            out.append(iv)
    return NumSet(tuple(out), integral)


def _integral(iv: Interval) -> Interval:
    lo = None if iv.lo is None else Decimal(math.floor(iv.lo) + 1 if iv.lo == math.floor(iv.lo) and not iv.lo_incl
                                            else math.ceil(iv.lo))
    hi = None if iv.hi is None else Decimal(math.ceil(iv.hi) - 1 if iv.hi == math.ceil(iv.hi) and not iv.hi_incl
                                            else math.floor(iv.hi))
    return Interval(lo, lo is not None, hi, hi is not None)


def _empty(iv: Interval) -> bool:
    if iv.lo is None or iv.hi is None:
        return False
    return iv.lo > iv.hi or (iv.lo == iv.hi and not (iv.lo_incl and iv.hi_incl))


def _touches(a: Interval, b: Interval, integral: bool) -> bool:
    if a.hi is None:
        return True
    if integral:
        return b.lo is None or b.lo <= a.hi + 1
    return b.lo is None or b.lo < a.hi or (b.lo == a.hi and (a.hi_incl or b.lo_incl))


def _max_end(a: Interval, b: Interval) -> tuple[Decimal | None, bool]:
    if a.hi is None or b.hi is None:
        return None, False
    if a.hi != b.hi:
        return (a.hi, a.hi_incl) if a.hi > b.hi else (b.hi, b.hi_incl)
    return a.hi, a.hi_incl or b.hi_incl


# ---- emission --------------------------------------------------------------------------------------------

def numbers_regex(ints: NumSet, fracs: NumSet) -> ir.Node:
    """Decimal spellings of every member of ints ∪ fracs (with exponents if that is every number)."""
    if ints.is_everything() and fracs.is_everything():
        return JSON_NUMBER
    parts = [ir.seq(integer_range(_int(iv.lo), _int(iv.hi)), INTEGER_FRACTION) for iv in ints.intervals]
    parts += [fraction_interval(iv) for iv in fracs.intervals]
    return ir.alt(*parts)


def _int(v: Decimal | None) -> int | None:
    return None if v is None else int(v)


def integer_range(lo: int | None, hi: int | None) -> ir.Node:
    """Canonical integer literals (no leading zeros, no "-0") with lo <= value <= hi."""
    parts = []
    if lo is None or lo < 0:
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        parts.append(ir.seq(ir.char("-"), _nonneg_range(mag_lo, None if lo is None else -lo)))
    if hi is None or hi >= 0:
        parts.append(_nonneg_range(max(lo or 0, 0), hi))
    return ir.alt(*parts)


def _nonneg_range(lo: int, hi: int | None, free_digits: int = FREE_INT_DIGITS) -> ir.Node:
    """lo..hi; without `hi`, numbers longer than lo get at most `free_digits` digits (or len(lo) + 1)."""
    if hi is not None and lo > hi:
        return ir.NEVER
    top_len = len(str(lo)) if hi is None else len(str(hi))
    parts: list[ir.Node] = []
    full: list[int] = []  # why: a run of lengths taken whole is one `[1-9][0-9]{m,n}`, not n - m + 1 branches
    for n in range(len(str(lo)), top_len + 1):
        a = max(lo, 10 ** (n - 1) if n > 1 else 0)
        b = 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if n > 1 and a == 10 ** (n - 1) and b == 10**n - 1:
            full.append(n)
            continue
        if full:
            parts.append(ir.seq(NONZERO, ir.rep(DIGIT, full[0] - 1, full[-1] - 1)))
            full = []
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if full:
        parts.append(ir.seq(NONZERO, ir.rep(DIGIT, full[0] - 1, full[-1] - 1)))
    if hi is None:  # every longer number
        parts.append(ir.seq(NONZERO, ir.rep(DIGIT, top_len, max(top_len, free_digits - 1))))
    return ir.alt(*parts)


@lru_cache(maxsize=4096)
def _same_length(a: str, b: str) -> ir.Node:
    """Digit strings of len(a) == len(b) between a and b inclusive."""
    if a == b:
        return ir.lit(a)
    rest = len(a) - 1
    if rest == 0:
        return ir.chars(((ord(a), ord(b)),))
    if a[0] == b[0]:
        return ir.seq(ir.char(a[0]), _same_length(a[1:], b[1:]))
    low_full, high_full = a[1:] == "0" * rest, b[1:] == "9" * rest
    first = ord(a[0]) + (0 if low_full else 1)
    last = ord(b[0]) - (0 if high_full else 1)
    parts = []
    if not low_full:
        parts.append(ir.seq(ir.char(a[0]), _same_length(a[1:], "9" * rest)))
    if first <= last:
        parts.append(ir.seq(ir.chars(((first, last),)), ir.rep(DIGIT, rest, rest)))
    if not high_full:
        parts.append(ir.seq(ir.char(b[0]), _same_length("0" * rest, b[1:])))
    return ir.alt(*parts)


def fraction_interval(iv: Interval, room: int | None = None) -> ir.Node:
    """Non-integer decimals inside one real interval (with at most `room` fraction digits, if given)."""
    parts = []
    zero = Decimal(0)
    if iv.lo is None or iv.lo < 0:  # negative part, mirrored: -x in (0, -lo]
        hi = None if iv.lo is None else -iv.lo
        lo = zero if iv.hi is None or iv.hi >= 0 else -iv.hi
        lo_incl = False if iv.hi is None or iv.hi >= 0 else iv.hi_incl
        parts.append(ir.seq(ir.char("-"), _positive_fractions(lo, lo_incl, hi, iv.lo_incl, room)))
    if iv.hi is None or iv.hi > 0:
        lo = zero if iv.lo is None or iv.lo < 0 else iv.lo
        lo_incl = False if iv.lo is None or iv.lo < 0 else iv.lo_incl
        parts.append(_positive_fractions(lo, lo_incl, iv.hi, iv.hi_incl, room))
    return ir.alt(*parts)


def _positive_fractions(lo: Decimal, lo_incl: bool, hi: Decimal | None, hi_incl: bool,
                        room: int | None = None) -> ir.Node:
    """Non-integers x >= 0 with lo <(=) x <(=) hi, as `int.frac` (at most `room` fraction digits, if given)."""
    n_lo = math.floor(lo)
    lo_frac = _frac_digits(lo)
    if hi is not None and math.floor(hi) == n_lo:
        return _spelled(n_lo, _fraction(lo_frac, lo_incl, _frac_digits(hi), hi_incl, room))
    parts = [_spelled(n_lo, _fraction(lo_frac, lo_incl, None, False, room))]
    n_hi = None if hi is None else math.floor(hi)
    if n_hi is None or n_hi - 1 >= n_lo + 1:
        parts.append(ir.seq(_nonneg_range(n_lo + 1, None if n_hi is None else n_hi - 1, FREE_FRAC_INT_DIGITS),
                            ir.char("."),
                            _fraction("", False, None, False, room)))
    if hi is not None:
        parts.append(_spelled(n_hi, _fraction("", True, _frac_digits(hi), hi_incl, room)))  # type: ignore[arg-type]
    return ir.alt(*parts)


def _spelled(int_part: int, fraction: ir.Node) -> ir.Node:
    return ir.seq(ir.lit(str(int_part)), ir.char("."), fraction)


def _frac_digits(v: Decimal) -> str:
    """The digits after the point of |v|, without trailing zeros ("" for integers)."""
    text = format(abs(v) - math.floor(abs(v)), "f")
    return text.partition(".")[2].rstrip("0")


_ANY = None  # a side without a constraint


@lru_cache(maxsize=4096)
def _fraction(a: str | None, a_incl: bool, b: str | None, b_incl: bool, room: int | None = None) -> ir.Node:
    """Non-empty digit strings w, at least one non-zero, with 0.a <(=) 0.w <(=) 0.b (None = no bound),
    at most `room` digits long if given."""
    return _digits(a if a is not None else "", a_incl and a is not None and a != "", b, b_incl, True, room)


@lru_cache(maxsize=8192)
def _digits(a: str | None, a_incl: bool, b: str | None, b_incl: bool, nonempty: bool,
            room: int | None = None) -> ir.Node:
    """Digit strings w (nonempty if asked) with lower bound 0.a (None: satisfied) and upper bound 0.b;
    with `room`, at most that many digits (the free tail stays within FREE_FRAC_DIGITS either way)."""
    free = FREE_FRAC_DIGITS if room is None else min(room, FREE_FRAC_DIGITS)
    if a == "" and a_incl:
        a = None  # why: "value >= 0" holds for every digit string
    if a is None and b is None:
        return ir.rep(DIGIT, int(nonempty), free) if free >= int(nonempty) else ir.NEVER
    if a == "" and b == "":
        return ir.NEVER  # above zero and at most zero
    if a == "" and not a_incl and b is None:
        return NONZERO_FRACTION if room is None else _nonzero_digits(free)
    if a is None and b == "":
        return ir.rep(ir.char("0"), int(nonempty), free) if b_incl and free >= int(nonempty) else ir.NEVER
    empty_ok = (a is None or (a == "" and a_incl)) and (b is None or b != "" or b_incl)
    if room == 0:
        return ir.EMPTY if empty_ok and not nonempty else ir.NEVER
    groups: dict[tuple, list[int]] = {}
    for c in range(10):
        lower = _next_lower(a, a_incl, c)
        upper = _next_upper(b, b_incl, c)
        if lower is not False and upper is not False:
            groups.setdefault((lower, upper), []).append(c)
    parts = [ir.EMPTY] if empty_ok and not nonempty else []
    for (lower, upper), cs in groups.items():
        rest = _digits(lower[0], lower[1], upper[0], upper[1], False, None if room is None else room - 1)
        parts.append(ir.seq(ir.chars(tuple((48 + c, 48 + c) for c in cs)), rest))
    return ir.alt(*parts)


@lru_cache(maxsize=64)
def _nonzero_digits(free: int) -> ir.Node:
    """1..free digits with at least one non-zero."""
    return ir.alt(*(ir.seq(ir.rep(ir.char("0"), k, k), NONZERO, ir.rep(DIGIT, 0, free - 1 - k)) for k in range(free)))


def _next_lower(a: str | None, a_incl: bool, c: int):
    if a is None:
        return (None, False)
    if a == "":
        return (None, False) if a_incl or c > 0 else ("", False)
    first = int(a[0])
    return (None, False) if c > first else ((a[1:], a_incl) if c == first else False)


def _next_upper(b: str | None, b_incl: bool, c: int):
    if b is None:
        return (None, False)
    if b == "":
        return ("", b_incl) if c == 0 and b_incl else False
    first = int(b[0])
    return (None, False) if c < first else ((b[1:], b_incl) if c == first else False)
