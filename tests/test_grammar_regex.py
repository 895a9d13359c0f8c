"""Regex and choices constraints, and the outlines-core defects the automaton works around.

A `regex` constraint is a Python-syntax regular expression the whole output must match (`re.fullmatch`
semantics); `choices` is an alternation of literal strings. Both compile to the same token automaton as
JSON schemas. Python's `re` is the oracle here.
"""

from __future__ import annotations

import random
import re

import pytest
from outlines_core import Index

from sprig.grammar import (
    GrammarCompiler,
    GrammarError,
    GrammarKind,
    GrammarSpec,
    JsonOptions,
    TokenizerInfo,
    matcher_for,
)
from sprig.grammar.outlines.automaton import outlines_vocabulary, probe_outlines_core


def accepts(compiled, info: TokenizerInfo, text: str) -> bool:
    """Tokenize like the model would, walk the tokens, then require EOS to be allowed."""
    matcher = matcher_for(compiled)
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def accepts_bytewise(compiled, text: str) -> bool:
    """The same text spelled one byte-token at a time (a different tokenization of the same bytes)."""
    matcher = matcher_for(compiled)
    byte_tokens = compiled.tokenizer_info.single_byte_tokens()
    return all(matcher.accept_token(byte_tokens[b]) for b in text.encode()) and matcher.can_finish()


# ---- the outlines-core defects ---------------------------------------------------------------------------

def test_installed_outlines_core_has_the_defects():
    """Detection: if a future outlines-core fixes them, this says so (the workaround stays harmless)."""
    assert probe_outlines_core() == {"exit_accepting_state": True, "shadowed_alternative": True}


def test_defect_on_the_real_vocabulary(info):
    """Raw outlines-core on the tiny tokenizer: `1(\\.5)?` cannot emit "." after "1"."""
    index = Index(r"1(\.5)?", outlines_vocabulary(info))
    one, dot = info.tokenizer.token_to_id("1"), info.tokenizer.token_to_id(".")
    after_one = index.get_next_state(index.get_initial_state(), one)
    assert after_one is not None and index.get_next_state(after_one, dot) is None


@pytest.mark.parametrize("regex,text", [
    (r"1(\.5)?", "1.5"),  # a token leaving an accepting state through a non-accepting one
    (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", "0.5"),
    (r"a|ab", "ab"),  # leftmost-first alternation would drop the longer branch
    (r"[1-9]|1[0-2]", "12"),
    (r"(true|truex)", "truex"),
])
def test_workaround_restores_missing_transitions(compiler, info, regex, text):
    compiled = compiler.compile(GrammarSpec.regex(regex))
    assert accepts(compiled, info, text)
    assert accepts_bytewise(compiled, text)


def test_json_number_can_produce_zero_point_five(compiler, info):
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "number"}))
    for text in ("0.5", "0", "-0.5e3", "10.25"):
        assert accepts(compiled, info, text) and accepts_bytewise(compiled, text), text


# ---- regex semantics ---------------------------------------------------------------------------------------

REGEXES = [r"[a-c]{2,4}", r"(ab|a)(bc|c)?", r"a*b+c?", r"[^abc]{1,3}", r"(?i)ab", r"\d{1,3}(,\d{3})*",
           r"(x|y|)z", r"[a-c]+?\.?", r"(a|b)(a|b)"]


@pytest.mark.parametrize("regex", REGEXES)
def test_regex_agrees_with_python_re(compiler, info, regex):
    compiled = compiler.compile(GrammarSpec.regex(regex))
    rng = random.Random(regex)
    alphabet = "abcxyzAB.,0123 é"
    samples = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7))) for _ in range(400)}
    samples |= {"ab", "abc", "abbc", "aab", "1,234", "12,34", "z", "yz", "é"}
    for text in sorted(samples):
        want = re.fullmatch(regex, text) is not None
        assert accepts(compiled, info, text) == want, (regex, text)
        assert accepts_bytewise(compiled, text) == want, (regex, text)


def test_anchors_are_harmless_in_full_match(compiler, info):
    compiled = compiler.compile(GrammarSpec.regex(r"^(yes|no)$"))
    assert accepts(compiled, info, "yes") and not accepts(compiled, info, "yesno")


@pytest.fixture(scope="module")
def outlines_compiler(info):
    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp:
        yield comp


def test_only_the_outlines_backend_leaves_nul_out(compiler, outlines_compiler, info):
    """NUL is the outlines automaton's end sentinel; the llguidance backend has none and allows it."""
    nul = GrammarSpec.regex(r"[\s\S]{0,3}")
    assert accepts(compiler.compile(nul), info, "a\x00") and accepts_bytewise(compiler.compile(nul), "a\x00")
    compiled = outlines_compiler.compile(nul)
    assert accepts(compiled, info, "a b") and not accepts_bytewise(compiled, "a\x00")
    assert accepts(compiler.compile(GrammarSpec.choices(["a\x00b", "c"])), info, "a\x00b")
    for spec, code in ((GrammarSpec.choices(["a\x00b"]), "invalid_choices"), (GrammarSpec.regex("\x00"), "invalid_regex")):
        with pytest.raises(GrammarError) as err:
            outlines_compiler.compile(spec)
        assert err.value.code == code and "NUL" in err.value.message


# ---- choices ------------------------------------------------------------------------------------------------

def test_choices_are_literal(compiler, info):
    options = ["a.b", "(x)", "yes|no", "naïve", "a+", ""]
    compiled = compiler.compile(GrammarSpec.choices(options))
    for text in options:
        assert accepts(compiled, info, text), text
    for text in ("aXb", "x", "yes", "aa", "naive"):
        assert not accepts(compiled, info, text), text


@pytest.mark.parametrize("bad", [[], [1, 2], "abc", ["a", None]])
def test_bad_choices(compiler, bad):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec(GrammarKind.CHOICES, bad))
    assert err.value.code == "invalid_choices" and err.value.param == "choices"


# ---- JSON object mode -----------------------------------------------------------------------------------------

def test_json_object_mode(compiler, info):
    compiled = compiler.compile(GrammarSpec.json_object())
    for text in ('{}', '{"a":1}', '{"a":[1,null],"c":"d"}', '{"k":{"x":true}}'):
        assert accepts(compiled, info, text), text
    for text in ('[]', '1', '"x"', '{"a":}', '{a:1}', '{"a":1,}', ''):
        assert not accepts(compiled, info, text), text


def test_json_object_mode_nesting_bound_is_an_option_of_the_regex_backend(compiler, outlines_compiler, info):
    deep = '{"a":{"b":{"c":{"d":1}}}}'
    outlines = outlines_compiler
    assert not accepts(outlines.compile(GrammarSpec.json_object()), info, deep)
    assert accepts(outlines.compile(GrammarSpec.json_object(JsonOptions(any_value_depth=4))), info, deep)
    deeper = '{"a":' * 200 + '{}' + '}' * 200  # the grammar backend: any depth
    assert accepts(compiler.compile(GrammarSpec.json_object()), info, deeper)
