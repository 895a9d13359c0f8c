"""Regular expressions (ECMA-262 `pattern`s and Python-syntax `regex` constraints) → regex trees.

Python's own parser (`re._parser`) reads the syntax; the meaning is assigned here, per dialect (`.` and
`\\u{...}` differ); `\\d`, `\\w`, `\\s` are ASCII in both (`char_classes.shorthand`). Anchors are handled
exactly: every sub-expression is translated into up to four variants keyed by (must start at the beginning
of the text, must end at its end), which makes `^a|b$` or `(^a)b` mean what they say. Constructs that are
not regular (backreferences, lookaround, word boundaries) are refused with `PatternUnsupported`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sprig.grammar.errors import too_complex
from sprig.grammar.regex import charset, ir
from sprig.grammar.regex.char_classes import Dialect, any_char, shorthand, unicode_property
from sprig.grammar.regex.charset import Ranges

try:  # Python >= 3.11
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MAX_PATTERN_CHARS = 100_000
_PLACEHOLDER_BASE = 0x100000  # why: plane-16 private use stands in for \p{..} classes that re cannot parse
_IGNORECASE, _MULTILINE, _DOTALL = sre_c.SRE_FLAG_IGNORECASE, sre_c.SRE_FLAG_MULTILINE, sre_c.SRE_FLAG_DOTALL
Variants = dict[tuple[bool, bool], ir.Node]  # (anchored at start, anchored at end) -> language


class PatternSyntaxError(ValueError):
    """The pattern does not parse."""


class PatternUnsupported(ValueError):
    """The pattern parses but uses a construct that is not a regular language (or that sprig lacks)."""


@dataclass
class _Ctx:
    dialect: Dialect
    classes: list[Ranges]  # placeholder index -> class


def regex_language(pattern: str, dialect: Dialect, search: bool) -> ir.Node:
    """The set of strings `pattern` accepts: anywhere inside the string if `search`, else the whole string."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise too_complex(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    ctx = _Ctx(dialect, [])
    text = _preprocess(pattern, ctx)
    try:
        parsed = sre_parse.parse(text, 0)
    except (sre_c.error, OverflowError) as exc:
        raise PatternSyntaxError(str(exc)) from None
    except RecursionError:
        raise too_complex("pattern nested too deeply") from None
    flags = parsed.state.flags
    if flags & _MULTILINE:
        raise PatternUnsupported("multiline mode (?m)")
    variants = _sequence(list(parsed), flags, ctx)
    pad = ir.star(ir.chars(charset.ALL_CHARS)) if search else ir.EMPTY
    return ir.alt(*(ir.seq(ir.EMPTY if s else pad, node, ir.EMPTY if e else pad)
                    for (s, e), node in variants.items()))


def _preprocess(pattern: str, ctx: _Ctx) -> str:
    """Rewrite ECMA-only escapes (\\p{..}, \\P{..}, \\u{..}, \\cX) into something `re` parses."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if ord(c) >= _PLACEHOLDER_BASE:
            raise PatternUnsupported("characters from plane 16 (private use)")
        if c != "\\" or i + 1 >= len(pattern):
            out.append(c)
            i += 1
            continue
        nxt = pattern[i + 1]
        if nxt in "pP" and pattern.startswith("{", i + 2):
            end = pattern.find("}", i + 3)
            if end < 0:
                raise PatternSyntaxError("unterminated \\p{...}")
            ranges = unicode_property(pattern[i + 3:end])
            if ranges is None:
                raise PatternUnsupported(f"unknown Unicode property {pattern[i + 3:end]!r}")
            ctx.classes.append(charset.complement(ranges) if nxt == "P" else ranges)
            out.append(chr(_PLACEHOLDER_BASE + len(ctx.classes) - 1))
            i = end + 1
        elif nxt == "u" and pattern.startswith("{", i + 2) and ctx.dialect is Dialect.ECMA:
            end = pattern.find("}", i + 3)
            out.append(f"\\U{int(pattern[i + 3:end], 16):08x}" if end > 0 else "\\u")
            i = end + 1 if end > 0 else i + 2
        elif nxt == "c" and i + 2 < len(pattern) and pattern[i + 2].isascii() and pattern[i + 2].isalpha():
            out.append(f"\\x{ord(pattern[i + 2]) % 32:02x}")
            i += 3
        else:
            out.append(pattern[i:i + 2])
            i += 2
    return "".join(out)


def _sequence(items: list, flags: int, ctx: _Ctx) -> Variants:
    acc: Variants = {(False, False): ir.EMPTY}
    for op, av in items:
        acc = _concat(acc, _item(op, av, flags, ctx))
    return acc


def _concat(left: Variants, right: Variants) -> Variants:
    out: dict[tuple[bool, bool], list[ir.Node]] = {}
    for (ls, le), lnode in left.items():
        for (rs, re_), rnode in right.items():
            if le:  # left must end at the end of the text: right can only match ""
                rnode = ir.EMPTY if rnode.min_len == 0 else ir.NEVER
            if rs:  # right must start at the beginning: left can only match ""
                lnode = ir.EMPTY if lnode.min_len == 0 else ir.NEVER
            node = ir.seq(lnode, rnode)
            if not ir.is_never(node):
                out.setdefault((ls or rs, le or re_), []).append(node)
    return {k: ir.alt(*v) for k, v in out.items()}


def _plain(node: ir.Node) -> Variants:
    return {(False, False): node}


def _item(op, av, flags: int, ctx: _Ctx) -> Variants:  # noqa: C901 - one branch per opcode
    if op is sre_c.LITERAL:
        return _plain(_char_class(((av, av),), flags, ctx))
    if op is sre_c.NOT_LITERAL:
        return _plain(ir.chars(charset.complement(_class_ranges([(sre_c.LITERAL, av)], flags, ctx))))
    if op is sre_c.ANY:
        return _plain(ir.chars(any_char(ctx.dialect, bool(flags & _DOTALL))))
    if op is sre_c.IN:
        return _plain(ir.chars(_class_ranges(av, flags, ctx)))
    if op is sre_c.BRANCH:
        out: dict[tuple[bool, bool], list[ir.Node]] = {}
        for branch in av[1]:
            for key, node in _sequence(list(branch), flags, ctx).items():
                out.setdefault(key, []).append(node)
        return {k: ir.alt(*v) for k, v in out.items()}
    if op is sre_c.SUBPATTERN:
        _, add, remove, sub = av
        if add & _MULTILINE:
            raise PatternUnsupported("multiline mode (?m)")
        return _sequence(list(sub), (flags | add) & ~remove, ctx)
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        return _repeat(av, flags, ctx)
    if op is sre_c.AT:
        return _anchor(av)
    names = {sre_c.GROUPREF: "backreferences", sre_c.GROUPREF_EXISTS: "conditional groups",
             sre_c.ASSERT: "lookaround", sre_c.ASSERT_NOT: "lookaround"}
    raise PatternUnsupported(names.get(op, f"the construct {str(op).lower()}"))


def _repeat(av, flags: int, ctx: _Ctx) -> Variants:
    lo, hi, sub = av
    inner = _sequence(list(sub), flags, ctx)
    if set(inner) != {(False, False)}:
        if all(node.min_len == 0 and node.max_len == 0 for node in inner.values()):
            return inner if lo > 0 else {**inner, (False, False): ir.EMPTY}  # why: (^)* and ($)+ are anchors
        raise PatternUnsupported("an anchor inside a repetition")
    return _plain(ir.rep(inner[(False, False)], lo, None if hi == sre_c.MAXREPEAT else hi))


def _anchor(code) -> Variants:
    if code in (sre_c.AT_BEGINNING, sre_c.AT_BEGINNING_STRING):
        return {(True, False): ir.EMPTY}
    if code in (sre_c.AT_END, sre_c.AT_END_STRING):
        return {(False, True): ir.EMPTY}
    raise PatternUnsupported("word boundaries (\\b, \\B)")


def _char_class(ranges: Ranges, flags: int, ctx: _Ctx) -> ir.Node:
    return ir.chars(_fold(_resolve_placeholders(ranges, ctx), flags))


def _class_ranges(items: list, flags: int, ctx: _Ctx) -> Ranges:
    negate = False
    acc: list[tuple[int, int]] = []
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            acc.append((av, av))
        elif op is sre_c.RANGE:
            acc.append(av)
        elif op is sre_c.CATEGORY:
            acc.extend(_category(av, negate))
        else:
            raise PatternUnsupported(f"the class item {str(op).lower()}")
    ranges = _fold(_resolve_placeholders(charset.normalize(acc), ctx), flags)
    return charset.complement(ranges) if negate else ranges


def _category(code, in_negated_class: bool) -> Ranges:
    kinds = {sre_c.CATEGORY_DIGIT: ("digit", False), sre_c.CATEGORY_NOT_DIGIT: ("digit", True),
             sre_c.CATEGORY_WORD: ("word", False), sre_c.CATEGORY_NOT_WORD: ("word", True),
             sre_c.CATEGORY_SPACE: ("space", False), sre_c.CATEGORY_NOT_SPACE: ("space", True)}
    if code not in kinds:
        raise PatternUnsupported(f"the category {str(code).lower()}")
    kind, negated = kinds[code]
    if negated:  # why: ASCII wherever the class finally adds characters, the wide set where it takes them away
        return charset.complement(shorthand(kind, excluded=not in_negated_class))
    return shorthand(kind, excluded=in_negated_class)


def _resolve_placeholders(ranges: Ranges, ctx: _Ctx) -> Ranges:
    if not ctx.classes or not ranges or ranges[-1][1] < _PLACEHOLDER_BASE:
        return ranges
    extra: list[tuple[int, int]] = []
    for index, cls in enumerate(ctx.classes):
        if charset.contains(ranges, _PLACEHOLDER_BASE + index):
            extra.extend(cls)
    kept = charset.intersect(ranges, ((0, _PLACEHOLDER_BASE - 1),))
    return charset.normalize(kept + tuple(extra))


def _fold(ranges: Ranges, flags: int) -> Ranges:
    if not flags & _IGNORECASE:
        return ranges
    if any(hi > 127 for lo, hi in ranges) and charset.size(ranges) < 0x10000:
        raise PatternUnsupported("case-insensitive matching of non-ASCII characters")
    return charset.case_insensitive(ranges)
