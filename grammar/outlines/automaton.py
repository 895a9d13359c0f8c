"""Regex → token automaton with outlines-core, with its defects worked around.

outlines-core 0.2.14 builds the automaton from a regex-automata DFA, which reports a match one byte late
and, in leftmost-first mode, drops lower-priority alternatives once an earlier one has matched. Two kinds
of transition go missing as a result: (1) a token whose last byte leaves an accepting state for a
non-accepting one (`1(\\.5)?` cannot emit "." after "1"; a `number` cannot produce "0.5"), and (2) tokens
reaching an alternative that extends an already-matched one (`a|ab` cannot emit "ab"; `[1-9]|1[0-2]`
cannot emit "12"). Both need the automaton to be in a match state in the middle of a token walk.
It also determinizes the *unanchored* search DFA (`.*?R`) eagerly although it only walks the anchored one;
for JSON-like regexes that DFA is exponentially larger (`x[a-z]{16}`: 0.75 s, doubling per repetition; any
JSON value nested 3 deep: 146 s instead of 0.15 s).

The workaround: compile `\x00(?:R)\x00` instead of `R`, give the end-of-sequence tokens the bytes "\x00",
and leave every real token that contains a NUL byte out of the vocabulary. Nothing matches before the final
NUL, so no state is accepting during a token walk and nothing is dropped; "R is complete here" becomes "an
EOS token is allowed here", which is exactly the EOS rule a matcher wants. The leading NUL makes the
unanchored search restart only at a NUL, which R never contains, so that DFA stays as small as the anchored
one. A matcher starts in the state after the leading NUL (`CompiledGrammar.start_state`). The price: a
`regex` constraint never generates a raw NUL character (JSON never contains one unescaped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from outlines_core import Index, Vocabulary

from sprig.grammar.backend import Backend
from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.spec import GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo

SENTINEL = b"\x00"


def outlines_vocabulary(info: TokenizerInfo) -> Vocabulary:
    """The vocabulary outlines-core walks: real tokens by their bytes, every EOS id spelled as the sentinel."""
    eos = set(info.eos_token_ids)
    mapping: dict[bytes, list[int]] = {}
    for token_id, raw in enumerate(info.token_bytes):
        if raw and token_id not in eos and SENTINEL not in raw:
            mapping.setdefault(raw, []).append(token_id)
    mapping[SENTINEL] = sorted(eos)
    # why: outlines-core skips tokens that carry its own EOS id, so it gets an id no token has
    return Vocabulary(info.vocab_size, mapping)


def probe_outlines_core() -> dict[str, bool]:
    """Which end-of-match defects the installed outlines-core has, on a five-token vocabulary.

    True means the raw library loses the transition; sprig's wrapped compile must never (see the tests).
    """
    vocabulary = Vocabulary(99, {b"1": [1], b".": [2], b"5": [3], b"a": [4], b"ab": [5], b"\x00": [6]})

    def reaches(regex: str, tokens: list[int]) -> bool:
        index = Index(regex, vocabulary)
        state = index.get_initial_state()
        for tok in tokens:
            state = index.get_next_state(state, tok)
            if state is None:
                return False
        return True

    return {"exit_accepting_state": not reaches(r"1(\.5)?", [1, 2]),
            "shadowed_alternative": not reaches(r"a|ab", [5])}


def build_index(regex: str, vocabulary: Vocabulary) -> Index:
    """Compile `regex` (Rust syntax, full match) into a token automaton; see the module note."""
    try:
        return Index(f"\\x00(?:{regex})\\x00", vocabulary)
    except BaseException as exc:  # outlines-core raises ValueError/RuntimeError/PanicException
        if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
            raise
        text = str(exc)
        if "incompatible" in text:
            raise GrammarError("the tokenizer cannot spell some text this grammar requires",
                               GrammarErrorCode.INVALID_REGEX) from None
        raise too_complex("the regex engine refused the expression (size or nesting limit)") from None


@dataclass
class CompiledGrammar:
    """A constraint compiled for one tokenizer; shared, read-only, by every matcher that uses it."""

    spec: GrammarSpec
    regex: str
    index: Index
    tokenizer_info: TokenizerInfo
    compile_time_s: float
    nbytes: int
    forced_bytes: dict[int, int] = field(default_factory=dict, repr=False)  # state -> forced byte or -1
    mask_rows: dict[int, Any] = field(default_factory=dict, repr=False)  # state -> cached bitmask row
    backend: Backend = Backend.OUTLINES

    @property
    def start_state(self) -> int:
        """The state after the leading sentinel, where generation starts."""
        return self.index.get_next_state(self.index.get_initial_state(), self.tokenizer_info.eos_token_ids[0])
