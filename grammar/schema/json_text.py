"""How JSON values are spelled: string escapes, literals and the whitespace policy.

Strings are constrained on their *value* (a pattern or a length counts decoded characters), but the model
writes JSON *text*. Every value character has exactly one spelling here, the one `json.dumps(...,
ensure_ascii=False)` writes: `"` and `\\` escaped, the five short control escapes, other control characters as
lowercase `\\u00xx`, everything else raw. The map from value to text is then a prefix code, so a regex over
values becomes a regex over text by replacing each character class with the spellings of its members.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from sprig.grammar.regex import charset, ir
from sprig.grammar.spec import JsonOptions, Whitespace

_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}
_RAW = charset.difference(((0x20, charset.MAX_CP),), ((0x22, 0x22), (0x5C, 0x5C)))
_HEX = "0123456789abcdef"


def dumps(value: Any) -> str:
    """The canonical compact spelling of a JSON scalar or key."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)  # why: the same few classes ([a-z], any char, digits) recur in every schema
def encode_chars(ranges: charset.Ranges) -> ir.Node:
    """The JSON-text spellings of the value characters in `ranges`."""
    parts = [ir.chars(charset.intersect(ranges, _RAW))]
    for cp, text in _SHORT_ESCAPES.items():
        if charset.contains(ranges, cp):
            parts.append(ir.lit(text))
    for high in (0, 1):  # \u0000-\u001f except the short escapes
        lows = [cp & 15 for cp in range(high * 16, high * 16 + 16)
                if cp not in _SHORT_ESCAPES and charset.contains(ranges, cp)]
        if lows:
            parts.append(ir.seq(ir.lit(f"\\u00{high}"), ir.chars(tuple((ord(_HEX[x]), ord(_HEX[x])) for x in lows))))
    return ir.alt(*parts)


def encode(value_node: ir.Node, memo: dict[int, ir.Node] | None = None) -> ir.Node:
    """Map a regex over string values to the regex over their JSON-text spellings (without quotes)."""
    memo = {} if memo is None else memo
    if value_node.sig in memo:
        return memo[value_node.sig]
    if isinstance(value_node, ir.Chars):
        out = encode_chars(value_node.ranges)
    elif isinstance(value_node, ir.Seq):
        out = ir.seq(*(encode(i, memo) for i in value_node.items))
    elif isinstance(value_node, ir.Alt):
        out = ir.alt(*(encode(i, memo) for i in value_node.items))
    else:
        assert isinstance(value_node, ir.Rep)
        out = ir.rep(encode(value_node.item, memo), value_node.lo, value_node.hi)
    memo[value_node.sig] = out
    return out


@functools.lru_cache(maxsize=1024)  # why: the same formats and key sets recur in every schema a worker sees
def json_string(value_node: ir.Node) -> ir.Node:
    """A quoted JSON string whose value is in the language of `value_node`."""
    return ir.seq(ir.char('"'), encode(value_node), ir.char('"'))


ANY_STRING = json_string(ir.star(ir.chars(charset.ALL_CHARS)))
NULL = ir.lit("null")
TRUE = ir.lit("true")
FALSE = ir.lit("false")


class Punctuation:
    """The structural pieces of JSON text under one whitespace policy."""

    def __init__(self, options: JsonOptions) -> None:
        ws = ir.EMPTY
        if options.whitespace is Whitespace.FLEXIBLE:
            ws = ir.rep(ir.chars(charset.of_chars(" \t\n\r")), 0, options.max_whitespace)
        spaced = options.whitespace is Whitespace.SPACED
        self.open_object = ir.seq(ir.char("{"), ws)
        self.close_object = ir.seq(ws, ir.char("}"))
        self.open_array = ir.seq(ir.char("["), ws)
        self.close_array = ir.seq(ws, ir.char("]"))
        self.comma = ir.seq(ws, ir.lit(", " if spaced else ","), ws)
        self.colon = ir.seq(ws, ir.lit(": " if spaced else ":"), ws)
        self.compact = options.whitespace is Whitespace.COMPACT

    def separator_text(self) -> tuple[str, str]:
        """(item separator, key separator) as json.dumps takes them, for serializing in this style."""
        return (",", ":") if self.compact else (", ", ": ")
