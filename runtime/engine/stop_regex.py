"""`stop_regex`: regular expressions that end a request when the output text matches one (SGLang's sampling key).

Patterns use Python `re` syntax and are compiled with the `regex` package, whose partial matching tells which tail
of the text could still grow into a match: `StopChecker` holds that tail back while streaming, exactly as it does
for a possible stop-string prefix. Compiled patterns are cached, so the n copies of a request share them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import regex


@dataclass(frozen=True)
class RegexMatch:
    """Where a stop regex matched in the text: [start, end) and the pattern as the user wrote it."""

    start: int
    end: int
    pattern: str


@functools.lru_cache(maxsize=256)
def compile_stop_regex(pattern: str) -> regex.Pattern[str]:
    """Compile `pattern`; raises ValueError with the reason when it is not a valid regex or matches ''."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as e:
        raise ValueError(f"stop_regex {pattern[:64]!r} is not a valid regular expression: {e}") from None
    if compiled.fullmatch("") is not None:  # why: it would match before any text and stop every request at once
        raise ValueError(f"stop_regex {pattern[:64]!r} matches the empty string")
    return compiled


def first_match(patterns: tuple[str, ...], text: str, pos: int) -> RegexMatch | None:
    """The earliest-starting match of any pattern in `text[pos:]` (on a tie, the pattern listed first)."""
    best: RegexMatch | None = None
    for pattern in patterns:
        m = compile_stop_regex(pattern).search(text, pos)
        if m is not None and (best is None or m.start() < best.start):
            best = RegexMatch(m.start(), m.end(), pattern)
    return best


def partial_start(patterns: tuple[str, ...], text: str, pos: int) -> int:
    """The earliest index >= `pos` where the rest of `text` could still grow into a match (len(text) if none)."""
    start = len(text)
    for pattern in patterns:
        m = compile_stop_regex(pattern).search(text, pos, partial=True)
        if m is not None:
            start = min(start, m.start())
    return start
