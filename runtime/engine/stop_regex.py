"""`stop_regex`: regular expressions that end a request when the output text matches one (SGLang's sampling key).

Patterns use Python `re` syntax and are compiled with the `regex` package, whose partial matching tells which tail
of the text could still grow into a match: `StopChecker` holds that tail back while streaming, exactly as it does
for a possible stop-string prefix. Compiled patterns are cached, so the n copies of a request share them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import regex

from sprig.runtime.errors import RequestError

SEARCH_TIMEOUT_S = 0.05  # why: a backtracking pattern must not stall the engine thread every request shares


class StopRegexTimeout(RequestError):
    """A stop regex took longer than its budget on the output: the request is stopped, the engine goes on."""

    def __init__(self, pattern: str) -> None:
        super().__init__(f"stop_regex {pattern[:64]!r} took longer than {SEARCH_TIMEOUT_S * 1000:.0f} ms to search "
                         "the output (catastrophic backtracking?); the request was stopped", "stop_regex",
                         "stop_regex_timeout")



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
        m = _search(pattern, text, pos, partial=False)
        if m is not None and (best is None or m.start() < best.start):
            best = RegexMatch(m.start(), m.end(), pattern)
    return best


def partial_start(patterns: tuple[str, ...], text: str, pos: int) -> int:
    """The earliest index >= `pos` where the rest of `text` could still grow into a match (len(text) if none)."""
    start = len(text)
    for pattern in patterns:
        m = _search(pattern, text, pos, partial=True)
        if m is not None:
            start = min(start, m.start())
    return start


def _search(pattern: str, text: str, pos: int, partial: bool) -> regex.Match[str] | None:
    try:
        return compile_stop_regex(pattern).search(text, pos, partial=partial, timeout=SEARCH_TIMEOUT_S)
    except TimeoutError:
        raise StopRegexTimeout(pattern) from None
