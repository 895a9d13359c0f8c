"""Every JSON spelling of a number set: `2`, `2.0`, `2e0`, `0.2E+1`, `20e-1`, `-0` are one value.

JSON Schema compares numbers by value (draft 6 on: `2.0` is an integer), so a bound or `multipleOf` must
accept any spelling whose value satisfies it. `numbers.py` spells each member canonically; this module adds
the other spellings a document may use:

* trailing zeros: a non-integer's fraction may end in up to MAX_TRAILING_ZEROS zeros, an integer may be
  written `7.0`...`7.000` (not in draft 4, where `7.0` is no integer), zero also as `-0`;
* exponents (drafts 6+): `m e X` is in the set when m x 10^X is. For each exponent X in -99..99 the mantissas
  form the set scaled by 10^-X, which `numbers.py` spells; the exponents whose mantissas are all (or none)
  of the mantissas a spelling may have are grouped into one exponent range, so only ~20 exponents near
  the bounds' magnitudes need a regex of their own.

Integers that `multipleOf` counts (intsteps.py: an automaton over their digits) get the suffixes that keep
their value (`10.0`, `10e0`, `10.00E+00`) and zero every spelling; other exponent forms of them are not
accepted (a subset: the remainder of m * 10^X would need one automaton per exponent).

Decimal notation follows the free-digit rules of `numbers.py` (integer part up to 15 digits, 9 before a
fraction, fraction up to 6 digits beyond the ones a bound dictates). In exponent notation the mantissa has
at most 6 digits before and 6 after the point (then trailing zeros), and the exponent 1-2 digits after up
to 2 leading zeros (`1.5e+05` as printf writes it). Within those limits the language is exactly the
spellings of the set.
"""

from __future__ import annotations

from decimal import Decimal
from enum import Enum
from functools import lru_cache

from sprig.grammar.regex import ir
from sprig.grammar.schema.numbers import (
    DIGIT,
    FREE_FRAC_DIGITS,
    FREE_INT_DIGITS,
    JSON_NUMBER,
    NONZERO,
    NONZERO_FRACTION,
    Interval,
    NumSet,
    fraction_interval,
    integer_range,
    numbers_regex,
)

MAX_TRAILING_ZEROS = 15  # why: a model writing `1.000...` must stop; 15 zeros keep every double's meaning
MAX_EXPONENT = 99  # why: two exponent digits span every double a bound can sensibly name (1e-99..1e99)
EXPONENT_LEADING_ZEROS = 2
ZEROS = ir.rep(ir.char("0"), 0, MAX_TRAILING_ZEROS)
INTEGER_ZEROS = ir.opt(ir.seq(ir.char("."), ir.rep(ir.char("0"), 1, MAX_TRAILING_ZEROS)))
E = ir.chars(((69, 69), (101, 101)))
MANTISSA_INT_DIGITS = 6  # why: each decade a mantissa spans is one more exponent whose bound needs its own regex
_MANTISSA_MIN, _MANTISSA_MAX = Decimal(10) ** -FREE_FRAC_DIGITS, Decimal(10) ** MANTISSA_INT_DIGITS
POSITIVE_MANTISSA = ir.alt(  # why: trailing zeros only after a point (after an integer they multiply it)
    ir.seq(NONZERO, ir.rep(DIGIT, 0, MANTISSA_INT_DIGITS - 1),
           ir.opt(ir.seq(ir.char("."), ir.rep(DIGIT, 1, FREE_FRAC_DIGITS), ZEROS))),
    ir.seq(ir.char("0"), ir.char("."), NONZERO_FRACTION, ZEROS))


class Spelling(Enum):
    """Which spellings of a number the grammar writes and accepts."""

    CANONICAL = "canonical"  # integers as literals, non-integers in shortest decimal (outlines backend)
    DRAFT4 = "draft4"  # + trailing zeros on non-integers and `-0`: draft 4 counts `2.0` as no integer
    ANY = "any"  # every JSON spelling (drafts 6+)

    @staticmethod
    def for_draft(draft: int) -> Spelling:
        return Spelling.DRAFT4 if draft == 4 else Spelling.ANY


def number_spellings(ints: NumSet, fracs: NumSet, spelling: Spelling) -> ir.Node:
    """The spellings of every member of ints ∪ (fracs minus the integers)."""
    if spelling is Spelling.CANONICAL:
        return numbers_regex(ints, fracs)
    return _spellings(ints, fracs, spelling is Spelling.ANY)


@lru_cache(maxsize=1024)  # why: the same few bounds (0, 1, 100, ...) recur across the schemas a worker compiles
def _spellings(ints: NumSet, fracs: NumSet, exponents: bool) -> ir.Node:
    if ints.is_everything() and fracs.is_everything():
        return JSON_NUMBER_ZEROS
    parts = [_decimal(ints, fracs, exponents)]
    if ints.contains(Decimal(0)):
        parts.append(zero_spellings(exponents))
    if exponents:
        reals = NumSet(fracs.intervals, True).union(NumSet.nothing(True))  # the integers fracs' intervals hold
        spans: list[tuple[Interval, bool]] = []
        if reals.intersect(ints.complement()).is_empty():  # why: then the set is ints ∪ fracs as real intervals
            spans += [(iv, False) for iv in fracs.intervals]
        if reals != ints:  # why: where they are equal, the real intervals' forms already spell every integer
            spans += [(iv, True) for iv in ints.intervals]
        points = [iv.lo for iv, _ in spans if iv.lo is not None and iv.lo == iv.hi and iv.lo != 0]
        parts += [_exponent_forms(iv, integral) for iv, integral in spans if iv.lo is None or iv.lo != iv.hi]
        parts.append(_point_forms(points))
    return ir.alt(*parts)


def zero_spellings(exponents: bool) -> ir.Node:
    """Zero's other spellings: `-0`, and with exponents `0.0`, `-0.00`, `0e5`, `-0E-2`, ..."""
    if not exponents:
        return ir.lit("-0")
    return ir.seq(ir.opt(ir.char("-")), ir.char("0"), INTEGER_ZEROS, ir.opt(_exponent(-MAX_EXPONENT, MAX_EXPONENT)))


def integer_suffixes() -> ir.Node:
    """What may follow a canonical integer literal without changing its value: `.0…`, `e0`, `.00E+00`."""
    return ir.alt(ir.seq(ir.char("."), ir.rep(ir.char("0"), 1, MAX_TRAILING_ZEROS)), ir.seq(INTEGER_ZEROS, _exponent(0, 0)))


def _decimal(ints: NumSet, fracs: NumSet, integer_zeros: bool) -> ir.Node:
    """Decimal notation: canonical integers (with `.0…` if allowed), non-integers with trailing zeros."""
    whole = numbers_regex(ints, NumSet.nothing(False))
    return ir.alt(ir.seq(whole, INTEGER_ZEROS) if integer_zeros else whole,
                  ir.seq(ir.alt(*(fraction_interval(iv) for iv in fracs.intervals)), ZEROS))


JSON_NUMBER_ZEROS = ir.seq(ir.opt(ir.char("-")),
                           ir.alt(ir.char("0"), ir.seq(NONZERO, ir.rep(DIGIT, 0, FREE_INT_DIGITS - 1))),
                           ir.opt(ir.seq(ir.char("."), ir.rep(DIGIT, 1, FREE_FRAC_DIGITS), ZEROS)),
                           ir.opt(ir.seq(E, ir.opt(ir.chars(((43, 43), (45, 45)))),
                                         ir.rep(ir.char("0"), 0, EXPONENT_LEADING_ZEROS), ir.rep(DIGIT, 1, 2))))
assert JSON_NUMBER.min_len == JSON_NUMBER_ZEROS.min_len  # why: the same numbers, with trailing zeros


def _exponent_forms(iv: Interval, integral: bool) -> ir.Node:
    """`m e X` spellings of the non-zero members of one interval (integers only if `integral`)."""
    zero = Decimal(0)
    positive = mirrored = None
    if iv.hi is None or iv.hi > 0:
        lo, lo_incl = (zero, False) if iv.lo is None or iv.lo < 0 else (iv.lo, iv.lo_incl)
        positive = Interval(lo, lo_incl and lo != 0, iv.hi, iv.hi_incl)
    if iv.lo is None or iv.lo < 0:  # the negative part, mirrored
        hi, hi_incl = (zero, False) if iv.hi is None or iv.hi >= 0 else (-iv.hi, iv.hi_incl)
        mirrored = Interval(hi, hi_incl, None if iv.lo is None else -iv.lo, iv.lo_incl)
    if positive == mirrored and positive is not None:  # why: a symmetric interval spells its forms once
        return ir.seq(ir.opt(ir.char("-")), _positive_forms(positive, integral))
    parts = [] if positive is None else [_positive_forms(positive, integral)]
    if mirrored is not None:
        parts.append(ir.seq(ir.char("-"), _positive_forms(mirrored, integral)))
    return ir.alt(*parts)


def _point_forms(values: list[Decimal]) -> ir.Node:
    """`m e X` for single values (enum, const): each exponent's mantissa is one literal, grouped by exponent."""
    groups: dict[tuple[int, bool], list[ir.Node]] = {}
    for v in values:
        magnitude = abs(v).adjusted()
        for x in range(max(-MAX_EXPONENT, magnitude - MANTISSA_INT_DIGITS + 1),
                       min(MAX_EXPONENT, magnitude + FREE_FRAC_DIGITS) + 1):
            text = format(abs(v).scaleb(-x).normalize(), "f")
            whole, _, frac = text.partition(".")
            if len(whole) <= MANTISSA_INT_DIGITS and len(frac) <= FREE_FRAC_DIGITS:
                groups.setdefault((x, not frac), []).append(ir.lit(("-" if v < 0 else "") + text))
    return ir.alt(*(ir.seq(ir.alt(*lits), INTEGER_ZEROS if whole else ZEROS, _exponent(x, x))
                    for (x, whole), lits in groups.items()))


def _positive_forms(iv: Interval, integral: bool) -> ir.Node:
    """`m e X` for the members x > 0 of `iv` (lo is not None, lo >= 0)."""
    assert iv.lo is not None
    parts: list[ir.Node] = []
    run: list[int] = []  # consecutive exponents where every mantissa qualifies
    for x in range(-MAX_EXPONENT, MAX_EXPONENT + 1):
        kind = _kind(iv, x, integral)
        if kind == "all":
            run.append(x)
            continue
        if run:
            parts.append(ir.seq(POSITIVE_MANTISSA, _exponent(run[0], run[-1])))
            run = []
        if kind == "some":
            parts.append(ir.seq(_mantissas(iv, x, integral), _exponent(x, x)))
    if run:
        parts.append(ir.seq(POSITIVE_MANTISSA, _exponent(run[0], run[-1])))
    if integral:  # why: x = n * 10^k, written as n's digits, k zeros, `e-k`: one alternation for every k
        parts.append(ir.seq(_positive_integers(iv), _scaled_down()))
    return ir.alt(*parts)


def _kind(iv: Interval, x: int, integral: bool) -> str:
    """Whether at exponent x "all", "some" or "none" of the positive mantissas give members of iv."""
    if integral and x < 0:
        return "none"  # why: the scaled alternation of _positive_forms spells these
    assert iv.lo is not None
    lo = iv.lo.scaleb(-x)
    hi = None if iv.hi is None else iv.hi.scaleb(-x)
    if (hi is not None and hi < _MANTISSA_MIN) or lo >= _MANTISSA_MAX:
        return "none"
    low_ok = lo < _MANTISSA_MIN or (lo == _MANTISSA_MIN and iv.lo_incl)
    if low_ok and (hi is None or hi >= _MANTISSA_MAX) and (not integral or x >= FREE_FRAC_DIGITS):
        return "all"
    return "some"


def _mantissas(iv: Interval, x: int, integral: bool) -> ir.Node:
    """Decimal mantissas m > 0 with m * 10^x in iv (and an integer, if `integral`: at most x fraction digits)."""
    assert iv.lo is not None
    hi, hi_incl = (_MANTISSA_MAX, False) if iv.hi is None or iv.hi.scaleb(-x) >= _MANTISSA_MAX \
        else (iv.hi.scaleb(-x), iv.hi_incl)
    scaled = Interval(iv.lo.scaleb(-x), iv.lo_incl, hi, hi_incl)
    whole = _positive_integers(scaled)
    fractions = fraction_interval(scaled, min(x, FREE_FRAC_DIGITS) if integral else FREE_FRAC_DIGITS)
    return ir.alt(ir.seq(whole, INTEGER_ZEROS), ir.seq(fractions, ZEROS))


def _positive_integers(iv: Interval) -> ir.Node:
    """Canonical literals of the integers n > 0 in iv (zero has its own spellings)."""
    ints = NumSet.nothing(True).union(NumSet((iv,), True)).intersect(NumSet.at_least(Decimal(0), False, True))
    return numbers_regex(ints, NumSet.nothing(False))


@lru_cache(maxsize=4096)
def _exponent(lo: int, hi: int) -> ir.Node:
    """`e`/`E`, then the exponents lo..hi spelled with an optional `+`, up to 2 leading zeros, or `-`."""
    lead = ir.rep(ir.char("0"), 0, EXPONENT_LEADING_ZEROS)
    parts = []
    if hi >= 0:
        parts.append(ir.seq(ir.opt(ir.char("+")), lead, integer_range(max(lo, 0), hi)))
    if lo < 0:
        parts.append(ir.seq(ir.char("-"), lead, integer_range(max(1, -hi), -lo)))
    if lo <= 0 <= hi:
        parts.append(ir.seq(ir.char("-"), lead, ir.char("0")))
    return ir.seq(E, ir.alt(*parts))


@lru_cache(maxsize=1)
def _scaled_down() -> ir.Node:
    """After an integer n's digits: k zeros and `e-k` (n * 10^k * 10^-k = n), for every k."""
    return ir.alt(*(ir.seq(ir.rep(ir.char("0"), k, k), INTEGER_ZEROS, _exponent(-k, -k))
                    for k in range(1, MANTISSA_INT_DIGITS)))


def warm() -> None:
    """Spell the number sets most schemas use (a compile worker's start-up, not each compile's cost)."""
    from sprig.grammar.schema.rewrites import INTEGER_FORMATS

    zero, one = Decimal(0), Decimal(1)
    sets = [(NumSet.everything(True), NumSet.nothing(False)),
            (NumSet.at_least(zero, True, True), NumSet.nothing(False)),
            (NumSet.at_least(one, True, True), NumSet.nothing(False)),
            (NumSet.at_least(zero, True, True), NumSet.at_least(zero, True, False))]
    sets += [(NumSet.at_least(Decimal(lo), True, True).intersect(NumSet.at_most(Decimal(hi), True, True)), NumSet.nothing(False))
             for lo, hi in INTEGER_FORMATS.values()]
    for ints, fracs in sets:
        number_spellings(ints, fracs, Spelling.ANY)
