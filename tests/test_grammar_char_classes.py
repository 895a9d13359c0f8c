"""`\\d`, `\\w`, `\\s` are ASCII classes in `regex` constraints and JSON Schema `pattern`s, on both backends.

`\\d{3}-\\d{4}` once produced '980-872߁' (U+07C1, an NKo digit): the Python dialect read `\\d` as Unicode.
Now the classes are `[0-9]`, `[A-Za-z0-9_]` and ASCII whitespace wherever they add characters; `\\D`,
`\\W`, `\\S` and `[^\\d]` take away every character that any reading counts (char_classes.shorthand).
Each case is checked by walking texts and by generating from the masks with random choices.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarSpec, allocate_token_bitmask, matcher_for

ASCII_DIGIT, ASCII_WORD, ASCII_SPACE = "0-9", "A-Za-z0-9_", " \\t\\n\\x0b\\x0c\\r"
REGEX = GrammarSpec.regex(r"\d{3}-\w{2}\s\d")
PATTERN = GrammarSpec.json_schema({"type": "string", "pattern": r"^\d{3}-\w{2}\s\d$"})
SHAPE = re.compile(f"[{ASCII_DIGIT}]{{3}}-[{ASCII_WORD}]{{2}}[{ASCII_SPACE}][{ASCII_DIGIT}]")
NON_ASCII = {"digit": "\u07c1", "word": "é", "space": "\u00a0"}  # NKo one, e acute, no-break space
BAD = ["980-ab \u07c1", "98\u0661-ab 7", "980-aé 7", "980-ab\u00a07", "980-ab\u20037"]  # NKo/Arabic-Indic, é, spaces
CASES = [(REGEX, str), (PATTERN, lambda value: json.dumps(value, ensure_ascii=False))]  # value -> the text written


def generate(compiled, rng: random.Random, max_tokens: int = 40) -> str:
    """Sample uniformly among the tokens the mask allows until EOS is taken."""
    info = compiled.tokenizer_info
    matcher, bitmask, out = matcher_for(compiled), allocate_token_bitmask(1, info.vocab_size), b""
    for _ in range(max_tokens):
        matcher.fill_bitmask(bitmask, 0)
        words = bitmask[0].tolist()
        allowed = [t for t in range(info.vocab_size) if (words[t // 32] >> (t % 32)) & 1]
        token = rng.choice(allowed)
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            return out.decode("utf-8")
        out += info.token_bytes[token] or b""
    raise AssertionError(f"no EOS after {max_tokens} tokens: {out!r}")


@pytest.mark.parametrize("spec,spell", CASES, ids=["regex", "pattern"])
def test_shorthand_classes_match_only_ascii(any_backend, spec, spell):
    compiled = any_backend.compile(spec)
    assert walk(compiled, spell("980-a_\t7")) and walk(compiled, spell("123-Zz 0"))
    for value in BAD:
        assert not walk(compiled, spell(value)), value


@pytest.mark.parametrize("spec,spell", CASES, ids=["regex", "pattern"])
def test_generation_from_shorthand_classes_stays_ascii(any_backend, spec, spell):
    compiled = any_backend.compile(spec)
    rng = random.Random(7)
    for _ in range(60):
        text = generate(compiled, rng)
        value = text if spell is str else json.loads(text)
        assert SHAPE.fullmatch(value) and spell(value) == text, repr(text)


def test_negated_classes_leave_out_what_any_reading_counts(any_backend):
    compiled = any_backend.compile(GrammarSpec.regex(r"\D\W\S[^\d][^\s]"))
    assert walk(compiled, "a-bcd")
    for pos, char in ((0, NON_ASCII["digit"]), (1, NON_ASCII["word"]), (2, NON_ASCII["space"]),
                      (3, "\u0661"), (4, "\u2003")):
        text = "a-bcd"[:pos] + char + "a-bcd"[pos + 1:]
        assert not walk(compiled, text), (pos, char)
