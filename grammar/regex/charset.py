"""Sets of Unicode scalar values as sorted, disjoint, inclusive code-point ranges."""

from __future__ import annotations

from collections.abc import Iterable

MAX_CP = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # why: not scalar values; no UTF-8 text (and no Rust regex) contains them
Ranges = tuple[tuple[int, int], ...]
EMPTY_SET: Ranges = ()
ALL_CHARS: Ranges = ((0, SURROGATES[0] - 1), (SURROGATES[1] + 1, MAX_CP))


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort, merge and clip ranges to scalar values."""
    out: list[list[int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return _drop_surrogates(tuple((lo, hi) for lo, hi in out))


def _drop_surrogates(ranges: Ranges) -> Ranges:
    lo_s, hi_s = SURROGATES
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi < lo_s or lo > hi_s:
            out.append((lo, hi))
            continue
        if lo < lo_s:
            out.append((lo, lo_s - 1))
        if hi > hi_s:
            out.append((hi_s + 1, hi))
    return tuple(out)


def of_chars(chars: str) -> Ranges:
    return normalize((ord(c), ord(c)) for c in chars)


def union(a: Ranges, b: Ranges) -> Ranges:
    return normalize(a + b)


def complement(a: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in a:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return _drop_surrogates(tuple(out))


def intersect(a: Ranges, b: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def difference(a: Ranges, b: Ranges) -> Ranges:
    return intersect(a, complement(b))


def contains(a: Ranges, cp: int) -> bool:
    lo_i, hi_i = 0, len(a)
    while lo_i < hi_i:  # why: binary search; classes such as \p{L} have hundreds of ranges
        mid = (lo_i + hi_i) // 2
        if a[mid][1] < cp:
            lo_i = mid + 1
        elif a[mid][0] > cp:
            hi_i = mid
        else:
            return True
    return False


def size(a: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in a)


def case_insensitive(a: Ranges) -> Ranges:
    """Add the other case of every ASCII letter (the only case folding sprig's patterns support)."""
    extra: list[tuple[int, int]] = []
    for lo, hi in (intersect(a, ((65, 90),))):
        extra.append((lo + 32, hi + 32))
    for lo, hi in (intersect(a, ((97, 122),))):
        extra.append((lo - 32, hi - 32))
    return normalize(a + tuple(extra))
