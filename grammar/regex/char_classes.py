"""Named character sets: the shorthand classes `\\d` `\\w` `\\s`, and Unicode general categories."""

from __future__ import annotations

import array
import functools
import re
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
ASCII_SPACE: Ranges = ((9, 13), (32, 32))
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
def _python_unicode_class(kind: str) -> Ranges:
    """What Python's Unicode `re` matches with `\\d`, `\\w` or `\\s`, read off one pass of `re` itself."""
    everything = array.array("I", range(sys.maxunicode + 1)).tobytes().decode("utf-32-le", "surrogatepass")
    found = re.finditer({"word": r"\w+", "space": r"\s+", "digit": r"\d+"}[kind], everything)
    return charset.normalize((m.start(), m.end() - 1) for m in found)


def shorthand(kind: str, excluded: bool = False) -> Ranges:
    """`\\d`, `\\w`, `\\s` (kind 'digit', 'word', 'space'), the same in both dialects.

    Where the class adds characters (`\\d`, `[\\d.]`) it is ASCII: `[0-9]`, `[A-Za-z0-9_]` (ECMA-262's) and
    `[\\t\\n\\v\\f\\r ]`, so `\\d{3}` never writes an NKo or Devanagari digit. Where it takes them away
    (`excluded`: `\\D`, `[^\\d]`) every character that ECMA-262 or Python's Unicode `re` counts is taken away.
    Either way the language is a subset of the pattern's under both readings, never more.
    """
    if not excluded:
        return {"digit": DIGITS, "word": ECMA_WORD, "space": ASCII_SPACE}[kind]
    ecma = {"digit": DIGITS, "word": ECMA_WORD, "space": ECMA_SPACE}[kind]
    return charset.normalize(ecma + _python_unicode_class(kind))


def any_char(dialect: Dialect, dotall: bool) -> Ranges:
    """What `.` matches."""
    if dotall:
        return charset.ALL_CHARS
    stop = ECMA_LINE_TERMINATORS if dialect is Dialect.ECMA else ((10, 10),)
    return charset.complement(stop)
