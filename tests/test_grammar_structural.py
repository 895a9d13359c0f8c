"""Triggered structures (structural tags): free text, a trigger, a structure exact to its schema, free text again."""

from __future__ import annotations

import json

import pytest

from sprig.grammar import GrammarError, GrammarSpec, matcher_for
from sprig.grammar.structural import Envelope, StructuralTag, Structure, TagMode

WEATHER = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                      "additionalProperties": False})
COUNT = json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]})


def hermes(name: str, schema: str) -> Structure:
    return Structure(f'<tool_call>\n{{"name": "{name}", "arguments": ', schema, "}\n</tool_call>")


def accepts(compiled, text: str) -> bool:
    """Whether `text`, tokenized as the model would, is a complete output of the grammar."""
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def prefix_ok(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids)


@pytest.fixture(scope="module")
def auto(compiler):
    tag = StructuralTag((hermes("weather", WEATHER), hermes("count", COUNT)), ("<tool_call>",))
    return compiler.compile(GrammarSpec.structural_tag(tag.to_json()))


CALL = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
COUNT_CALL = '<tool_call>\n{"name": "count", "arguments": {"n": 3}}\n</tool_call>'


@pytest.mark.parametrize("text", [
    "Just text, no call.",
    "",
    f"Let me look. {CALL}",
    f"{CALL} and {COUNT_CALL} done",
    "Example:\n```\n<tool_call> not a call {\n```\nThat was an example.",
])
def test_triggered_grammar_accepts_text_and_valid_calls(auto, text):
    assert accepts(auto, text)


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "nope", ',  # an undeclared tool
    '<tool_call>\n{"name": "weather", "arguments": {"town": ',  # a key the schema does not have
    '<tool_call>\n{"name": "count", "arguments": {"n": -',  # minimum 1: no number that starts with a minus (0 can: 0.5e1)
    '<tool_call>\n{"name": "count", "arguments": {"n": "3"',  # not an integer
])
def test_after_the_trigger_only_the_schema_is_allowed(auto, text):
    assert not prefix_ok(auto, text)


def test_an_unclosed_call_cannot_end(auto):
    assert prefix_ok(auto, CALL[:40]) and not accepts(auto, CALL[:40])


def test_without_parallel_calls_only_one_call_is_written(compiler):
    tag = StructuralTag((hermes("weather", WEATHER),), ("<tool_call>",), parallel=False)
    compiled = compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
    assert accepts(compiled, f"a {CALL} b")
    assert not prefix_ok(compiled, f"a {CALL} b <tool_call>")


def test_forced_mode_starts_with_a_call(compiler):
    tag = StructuralTag((hermes("weather", WEATHER),), ("<tool_call>",), TagMode.FORCED)
    compiled = compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
    assert accepts(compiled, CALL) and accepts(compiled, CALL + "\n" + CALL)
    assert not prefix_ok(compiled, "Sure")


def test_an_envelope_holds_a_run_of_calls(compiler):
    items = tuple(Structure(f'{{"name": "{n}", "arguments": ', s, "}") for n, s in (("weather", WEATHER),
                                                                                    ("count", COUNT)))
    tag = StructuralTag(items, ("[TOOL_CALLS]",), envelope=Envelope("[TOOL_CALLS] [", ", ", "]"))
    compiled = compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
    assert accepts(compiled, 'ok [TOOL_CALLS] [{"name": "weather", "arguments": {"city": "Oslo"}}, '
                             '{"name": "count", "arguments": {"n": 2}}]')
    assert not prefix_ok(compiled, '[TOOL_CALLS] [{"name": "count", "arguments": {"n": -')


def test_strict_structures_write_only_declared_keys(compiler):
    loose = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})
    for strict, ok in ((False, True), (True, False)):
        tag = StructuralTag((Structure("<f>", loose, "</f>", strict),), ("<f>",))
        compiled = compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
        assert prefix_ok(compiled, '<f>{"b": ') is ok


def test_a_client_tag_round_trips_and_bad_ones_name_the_field():
    raw = {"structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}], "triggers": ["<f"]}
    tag = StructuralTag.from_json(json.dumps(raw))
    assert StructuralTag.from_json(tag.to_json()) == tag
    with pytest.raises(GrammarError) as e:
        StructuralTag.from_json(json.dumps({**raw, "triggers": ["<g"]}))
    assert e.value.param == "structural_tag.structures.0.begin"
    with pytest.raises(GrammarError) as e:
        StructuralTag.from_json(json.dumps({"structures": [], "triggers": ["x"]}))
    assert e.value.param == "structural_tag.structures"


def test_an_invalid_schema_names_its_structure(compiler):
    tag = StructuralTag((Structure("<f>", '{"type": "object"}', "</f>"),
                         Structure("<g>", '{"type": 12}', "</g>")), ("<f>", "<g>"))
    with pytest.raises(GrammarError) as e:
        compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
    assert e.value.param.startswith("structural_tag.structures.1.schema")


def test_speculative_drafts_are_cut_where_a_call_breaks_its_schema(auto):
    """One grammar covers the free text and the calls, so the spec path's walk checks drafts on both sides."""
    from sprig.runtime.engine.spec.speculator import walk_grammar

    encode = auto.tokenizer_info.tokenizer.encode
    good = encode(f"hi {CALL} bye", add_special_tokens=False).ids
    bad = encode('hi <tool_call>\n{"name": "weather", "arguments": {"town"', add_special_tokens=False).ids
    matcher = matcher_for(auto)
    kept, rows = walk_grammar(matcher, good, auto.tokenizer_info.vocab_size)
    assert kept == good and rows.shape[0] == len(good) + 1
    kept, _ = walk_grammar(matcher, bad, auto.tokenizer_info.vocab_size)
    assert 0 < len(kept) < len(bad) and prefix_ok(auto, auto.tokenizer_info.tokenizer.decode(kept))
    assert matcher.state == matcher_for(auto).state  # the walk leaves the matcher where it started


def test_a_special_token_trigger_ends_free_text_and_opens_a_call(compiler):
    """Mistral's [TOOL_CALLS] is a special token (no text): the grammar names it by id (here <|im_start|>, id 1)."""
    tag = StructuralTag((Structure('<|im_start|>{"city": ', '{"type": "string"}', "}"),), ("<|im_start|>",),
                        trigger_tokens=(("<|im_start|>", 1),))
    compiled = compiler.compile(GrammarSpec.structural_tag(tag.to_json()))
    assert "<[1]>" in compiled.lark
    encode = compiled.tokenizer_info.tokenizer.encode
    matcher = matcher_for(compiled)
    ids = encode("some text", add_special_tokens=False).ids + [1] + encode('{"city": "x"}', add_special_tokens=False).ids
    assert all(matcher.accept_token(t) for t in ids) and matcher.can_finish()
    matcher = matcher_for(compiled)
    assert all(matcher.accept_token(t) for t in [1, *encode('{"city": ', add_special_tokens=False).ids])
    assert not matcher.accept_token(encode("7", add_special_tokens=False).ids[0])  # the schema holds after it
