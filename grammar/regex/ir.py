"""A small regular-expression tree that the JSON-schema, pattern and choices compilers build.

Building a tree instead of a string lets the compilers simplify as they go (an alternative that can never
match disappears, single characters merge into one class), measure the size before anything is compiled
(`weight` counts character positions, with counted repetitions multiplied out) and render one syntax for
outlines-core (Rust `regex`) and another for Python's `re` (used by tests as a second opinion).
"""

from __future__ import annotations

from enum import Enum

from sprig.grammar.errors import too_complex
from sprig.grammar.regex import charset
from sprig.grammar.regex.charset import Ranges

MAX_DEPTH = 180  # why: Rust's regex parser refuses nesting deeper than 250 groups
WEIGHT_CAP = 10**12  # why: keeps nested counted repetitions from building astronomically large ints


class Flavor(Enum):
    RUST = "rust"
    PYTHON = "python"


class Node:
    """A regular language. Build with `chars`, `lit`, `seq`, `alt`, `rep`; never mutate."""

    __slots__ = ("sig", "weight", "depth", "min_len", "max_len")

    def _finish(self, sig: int, weight: int, depth: int, min_len: int, max_len: int | None) -> None:
        if depth > MAX_DEPTH:
            raise too_complex(f"expression nested deeper than {MAX_DEPTH} levels")
        self.sig, self.weight, self.depth = sig, min(weight, WEIGHT_CAP), depth
        self.min_len, self.max_len = min_len, max_len  # in characters; max_len None = unbounded

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self.sig == other.sig

    def __hash__(self) -> int:
        return self.sig

    def render(self, flavor: Flavor = Flavor.RUST) -> str:
        return _render(self, flavor)


class Chars(Node):
    __slots__ = ("ranges",)

    def __init__(self, ranges: Ranges) -> None:
        self.ranges = ranges
        self._finish(hash(("c", ranges)), 1, 0, 1, 1)


class Seq(Node):
    __slots__ = ("items",)

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        max_len = None if any(i.max_len is None for i in items) else sum(i.max_len for i in items)  # type: ignore[misc]
        self._finish(hash(("s",) + tuple(i.sig for i in items)), sum(i.weight for i in items),
                     1 + max((i.depth for i in items), default=0), sum(i.min_len for i in items), max_len)


class Alt(Node):
    __slots__ = ("items",)

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        min_len = min((i.min_len for i in items), default=0)
        max_len = None if any(i.max_len is None for i in items) else max((i.max_len for i in items), default=0)  # type: ignore[type-var]
        self._finish(hash(("a",) + tuple(sorted(i.sig for i in items))), sum(i.weight for i in items),
                     1 + max((i.depth for i in items), default=0), min_len, max_len)


class Rep(Node):
    __slots__ = ("item", "lo", "hi")

    def __init__(self, item: Node, lo: int, hi: int | None) -> None:
        self.item, self.lo, self.hi = item, lo, hi
        mult = max(lo if hi is None else hi, 1)
        max_len = None if hi is None or item.max_len is None else item.max_len * hi
        self._finish(hash(("r", item.sig, lo, hi)), item.weight * mult, item.depth + 1,
                     item.min_len * lo, max_len)


EMPTY: Node = Seq(())  # the language {""}
NEVER: Node = Alt(())  # the empty language


def chars(ranges: Ranges) -> Node:
    ranges = charset.normalize(ranges)
    return Chars(ranges) if ranges else NEVER


def char(c: str) -> Node:
    return Chars(((ord(c), ord(c)),))


def lit(text: str) -> Node:
    return seq(*(char(c) for c in text))


def seq(*items: Node) -> Node:
    flat: list[Node] = []
    for item in items:
        if item is NEVER or (isinstance(item, Alt) and not item.items):
            return NEVER
        flat.extend(item.items if isinstance(item, Seq) else (item,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*items: Node) -> Node:
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, Alt) else (item,))
    singles = [i for i in flat if isinstance(i, Chars)]
    others: list[Node] = []
    seen: set[int] = set()
    for item in flat:
        if not isinstance(item, Chars) and item.sig not in seen:
            seen.add(item.sig)
            others.append(item)
    if singles:  # why: one character class is smaller than many one-character alternatives
        merged = charset.normalize(r for c in singles for r in c.ranges)  # type: ignore[attr-defined]
        others.insert(0, Chars(merged))
    if len(others) == 1:
        return others[0]
    return Alt(tuple(others))


def rep(item: Node, lo: int, hi: int | None = None) -> Node:
    if hi is not None and hi < lo:
        return NEVER
    if hi == 0 or item == EMPTY:
        return EMPTY
    if item == NEVER:
        return EMPTY if lo == 0 else NEVER
    if lo == 1 and hi == 1:
        return item
    return Rep(item, lo, hi)


def opt(item: Node) -> Node:
    return rep(item, 0, 1)


def star(item: Node) -> Node:
    return rep(item, 0, None)


def is_never(node: Node) -> bool:
    return isinstance(node, Alt) and not node.items


# ---- rendering -------------------------------------------------------------------------------------------

_META = set("\\.+*?()|[]{}^$#&-~")
_CLASS_META = set("\\[]^-&~")


def _escape(cp: int, flavor: Flavor, in_class: bool) -> str:
    c = chr(cp)
    if 0x21 <= cp < 0x7F or (cp == 0x20 and not in_class):
        return "\\" + c if c in (_CLASS_META if in_class else _META) else c
    if flavor is Flavor.RUST:
        return f"\\x{{{cp:X}}}"
    return f"\\x{cp:02x}" if cp < 0x100 else (f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}")


def _render_chars(ranges: Ranges, flavor: Flavor) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _escape(ranges[0][0], flavor, in_class=False)
    comp = charset.complement(ranges)
    negate = len(comp) < len(ranges)
    body = "".join(_escape(lo, flavor, True) if lo == hi else
                   f"{_escape(lo, flavor, True)}-{_escape(hi, flavor, True)}" for lo, hi in (comp if negate else ranges))
    if negate and not comp:
        return "[\\s\\S]" if flavor is Flavor.PYTHON else "[\\x{0}-\\x{10FFFF}]"
    return f"[^{body}]" if negate else f"[{body}]"


def _render(node: Node, flavor: Flavor) -> str:
    if isinstance(node, Chars):
        return _render_chars(node.ranges, flavor)
    if isinstance(node, Seq):
        return "".join(_group(i, flavor) if isinstance(i, Alt) else _render(i, flavor) for i in node.items)
    if isinstance(node, Alt):
        if not node.items:
            return "[^\\s\\S]" if flavor is Flavor.PYTHON else "[^\\x{0}-\\x{10FFFF}]"
        return "|".join(_render(i, flavor) for i in node.items)
    assert isinstance(node, Rep)
    inner = _render(node.item, flavor) if isinstance(node.item, Chars) else _group(node.item, flavor)
    return inner + _quantifier(node.lo, node.hi)


def _group(node: Node, flavor: Flavor) -> str:
    return f"(?:{_render(node, flavor)})"


def _quantifier(lo: int, hi: int | None) -> str:
    if hi is None:
        return "*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}"
    if lo == 0 and hi == 1:
        return "?"
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
