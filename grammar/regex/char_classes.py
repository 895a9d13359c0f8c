"""Named character sets: the shorthand classes of ECMA-262 and Python, and Unicode general categories."""

from __future__ import annotations

import functools
import sys
import unicodedata
from enum import Enum

from sprig.grammar.regex import charset
from sprig.grammar.regex.charset import Ranges


class Dialect(Enum):
    """Which regex semantics a pattern follows: JSON Schema `pattern` is ECMA-262; `regex` requests are Python."""

    ECMA = "ecma"
    PYTHON = "python"


DIGITS: Ranges = ((48, 57),)
ECMA_WORD: Ranges = charset.of_chars("_") + ((48, 57), (65, 90), (97, 122))
ECMA_SPACE: Ranges = charset.normalize([(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                                        (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
                                        (0xFEFF, 0xFEFF)])
ECMA_LINE_TERMINATORS: Ranges = charset.normalize([(10, 10), (13, 13), (0x2028, 0x2029)])

_CATEGORY_NAMES = {
    "Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
    "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
    "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P",
    "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z", "Space_Separator": "Zs",
    "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C", "Control": "Cc", "cntrl": "Cc",
    "Format": "Cf", "Surrogate": "Cs", "Private_Use": "Co", "Unassigned": "Cn",
}


def unicode_property(name: str) -> Ranges | None:
    """The set for `\\p{name}` (general categories, long or short names, optionally `gc=`); None if unknown."""
    for prefix in ("General_Category=", "gc="):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name in ("Any",):
        return charset.ALL_CHARS
    if name in ("ASCII",):
        return ((0, 127),)
    short = _CATEGORY_NAMES.get(name, name)
    if short == "LC":
        return charset.normalize(_category("Lu") + _category("Ll") + _category("Lt"))
    if len(short) == 1 and short in "LMNPSZC":
        return charset.normalize(r for sub in _subcategories(short) for r in _category(sub))
    return _category(short) if short in _all_categories() else None


@functools.cache
def _category_table() -> dict[str, Ranges]:
    # why: one pass over all code points (~0.3 s), done once per process and only if a pattern needs it
    table: dict[str, list[tuple[int, int]]] = {}
    prev, start = None, 0
    for cp in range(sys.maxunicode + 2):
        cat = unicodedata.category(chr(cp)) if cp <= sys.maxunicode else None
        if cat != prev:
            if prev is not None:
                table.setdefault(prev, []).append((start, cp - 1))
            prev, start = cat, cp
    return {k: charset.normalize(v) for k, v in table.items()}


def _all_categories() -> set[str]:
    return set(_category_table())


def _category(short: str) -> Ranges:
    return _category_table().get(short, ())


def _subcategories(major: str) -> list[str]:
    return [c for c in _all_categories() if c.startswith(major)]


@functools.cache
def _python_predicate_set(kind: str) -> Ranges:
    test = {"word": lambda c: c.isalnum() or c == "_", "space": str.isspace, "digit": str.isdecimal}[kind]
    out: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if test(chr(cp)):
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return charset.normalize(out)


def shorthand(kind: str, dialect: Dialect) -> Ranges:
    """`\\d`, `\\w`, `\\s` (kind 'digit', 'word', 'space') in the given dialect."""
    if dialect is Dialect.ECMA:
        return {"digit": DIGITS, "word": ECMA_WORD, "space": ECMA_SPACE}[kind]
    return _python_predicate_set(kind)


def any_char(dialect: Dialect, dotall: bool) -> Ranges:
    """What `.` matches."""
    if dotall:
        return charset.ALL_CHARS
    stop = ECMA_LINE_TERMINATORS if dialect is Dialect.ECMA else ((10, 10),)
    return charset.complement(stop)
