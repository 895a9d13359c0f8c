"""Tool-call formats by family: each one's parser (whole and streamed), its trigger and its output grammar."""

from __future__ import annotations

import json

import pytest

from sprig.grammar import GrammarSpec, matcher_for
from sprig.runtime.server.tool_formats import (
    FORMATS,
    LLAMA3,
    MISTRAL,
    PYTHONIC,
    QWEN25,
    CallParser,
    constrainable,
    format_for_template,
    tool_format,
)

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
COUNT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
FUNCTIONS = ({"name": "weather", "parameters": CITY}, {"name": "count", "parameters": COUNT})
NAMES = {"weather", "count"}

TEXTS = {
    "qwen25": 'Sure. <tool_call>\n{"name": "weather", "arguments": {"city": "Pa}ris"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "count", "arguments": {"n": 3}}\n</tool_call>',
    "llama3": '<|python_tag|>{"name": "weather", "parameters": {"city": "Pa}ris"}}; '
              '{"name": "count", "parameters": {"n": 3}}',
    "mistral": 'Sure. [TOOL_CALLS] [{"name": "weather", "arguments": {"city": "Pa}ris"}}, '
               '{"name": "count", "arguments": {"n": 3}}]',
    "pythonic": '[weather(city="Pa}ris"), count(n=3)]',
}


def parse(fmt, text: str, step: int | None = None):
    parser = CallParser(fmt, NAMES)
    content, pieces, headers = "", {}, []
    for i in range(0, len(text), step or len(text)):
        event = parser.feed(text[i:i + (step or len(text))])
        content += event.content
        headers += event.headers
        for k, v in event.pieces.items():
            pieces[k] = pieces.get(k, "") + v
    last = parser.finish()
    content += last.content
    headers += last.headers
    for k, v in last.pieces.items():
        pieces[k] = pieces.get(k, "") + v
    return content, parser.complete_calls(), pieces, headers


@pytest.mark.parametrize("name", list(TEXTS))
@pytest.mark.parametrize("step", [None, 1, 5])
def test_each_format_parses_two_calls_whole_and_streamed(name, step):
    content, calls, pieces, headers = parse(FORMATS[name], TEXTS[name], step)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("weather", {"city": "Pa}ris"}), ("count", {"n": 3})]
    assert headers == [0, 1]  # every call's header comes once
    assert [json.loads(pieces[k]) for k in (0, 1)] == [{"city": "Pa}ris"}, {"n": 3}]
    assert content.strip() in ("", "Sure.")


def test_a_cut_call_is_not_a_call_and_a_fenced_one_is_content():
    content, calls, _, _ = parse(QWEN25, 'x <tool_call>\n{"name": "weather", "arguments": {"city": "P')
    assert calls == [] and content.startswith("x <tool_call>")
    fenced = '```\n<tool_call>{"name": "weather", "arguments": {"city": "a"}}</tool_call>\n```'
    assert parse(QWEN25, fenced) == (fenced, [], {}, [])
    assert parse(QWEN25, "a <tool_call> then prose")[1] == []
    assert parse(QWEN25, '<tool_call>{"name": "unknown", "arguments": {}}</tool_call>')[1] == []


def test_names_and_templates_choose_formats():
    assert tool_format("hermes") is QWEN25 and tool_format("llama3") is LLAMA3
    with pytest.raises(ValueError, match="known: .*hermes.*mistral"):
        tool_format("nope")
    assert format_for_template("{{ '[TOOL_CALLS]' }}") is MISTRAL
    assert format_for_template("<|python_tag|>") is LLAMA3
    assert format_for_template(None) is QWEN25  # SmolLM2-Instruct's template renders no tools


@pytest.mark.parametrize("name", ["qwen25", "llama3", "mistral"])
def test_each_format_grammar_takes_its_calls_and_refuses_bad_arguments(compiler, name):
    fmt = FORMATS[name]
    compiled = compiler.compile(GrammarSpec.structural_tag(fmt.tag(FUNCTIONS, {}, False, True).to_json()))
    text = TEXTS[name].replace("<|python_tag|>", "")  # why: the tiny tokenizer has no such special token
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    matcher = matcher_for(compiled)
    assert all(matcher.accept_token(t) for t in ids) and matcher.can_finish()
    bad = TEXTS[name].replace("<|python_tag|>", "").replace('3}', '0}')  # minimum 1
    ids = compiled.tokenizer_info.tokenizer.encode(bad, add_special_tokens=False).ids
    matcher = matcher_for(compiled)
    assert not all(matcher.accept_token(t) for t in ids)


def test_pythonic_calls_are_constrained_only_when_forced(compiler):
    assert not constrainable(PYTHONIC, forced=False) and constrainable(PYTHONIC, forced=True)
    assert all(constrainable(f, forced=False) for f in (QWEN25, LLAMA3, MISTRAL))
    flags = {"type": "object", "properties": {"on": {"type": "boolean"}, "tag": {"enum": ["a", None]},
                                              "n": {"type": "integer"}}, "required": ["n"]}
    functions = (*FUNCTIONS, {"name": "flags", "parameters": flags})
    compiled = compiler.compile(GrammarSpec.structural_tag(PYTHONIC.tag(functions, {}, True, True).to_json()))

    def takes(text: str) -> bool:
        ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
        matcher = matcher_for(compiled)
        return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()

    assert takes(TEXTS["pythonic"]) and takes('[flags(on=True, tag=None, n=2)]') and takes("[flags(n=-4)]")
    assert not takes("[flags(on=true, n=2)]") and not takes("[flags(on=True)]")  # JSON literal; n is required
    assert not takes("[count(n=0)]") and not takes('[weather(town="x")]')
    parser = CallParser(PYTHONIC, {"flags"})
    parser.feed('[flags(on=True, tag=None, n=2)]')
    parser.finish()
    assert json.loads(parser.complete_calls()[0].arguments) == {"on": True, "tag": None, "n": 2}


def test_a_trigger_that_is_one_special_token_is_found_by_id(tiny_paths):
    from sprig.runtime.model.tokenizer import Tokenizer
    from sprig.runtime.server.tool_formats import special_token_id

    tok = Tokenizer(tiny_paths["tiny-llama"])
    assert special_token_id(tok, "<|im_start|>") == 1 and special_token_id(tok, "[TOOL_CALLS]") is None
    tag = MISTRAL.tag(FUNCTIONS, {}, forced=True, parallel=True, trigger_token=7)
    assert tag.token_of("[TOOL_CALLS]") == 7
