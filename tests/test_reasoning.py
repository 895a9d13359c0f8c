"""Reasoning models: thinking split from the answer (whole and streamed, markers cut anywhere), a constraint that
starts after the end-of-thinking marker, the thinking budget that forces it, and bad input.

The tiny Llama's byte-level vocabulary spells ``</think>`` in six tokens, so every marker the engine writes is cut
across stream deltas. Its random weights never close thinking on their own: `max_thinking_tokens` forces the
marker, which makes every run below deterministic (greedy)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx
import jsonschema
import openai
import pytest
import torch
from test_server_helpers import ServerProcess, assert_openai_error, tiny_model

from sprig import Engine
from sprig.grammar import GrammarSpec, matcher_for
from sprig.runtime.engine.generate_request import SamplingParamsError
from sprig.runtime.engine.thinking import MarkerTokens, ThinkingMatcher
from sprig.runtime.errors import RequestError
from sprig.runtime.reasoning_format import REASONING_FORMATS, reasoning_format
from sprig.runtime.server.reasoning import ReasoningPlan, ReasoningSplitter, split_reasoning

R1, QWEN3 = REASONING_FORMATS["deepseek-r1"], REASONING_FORMATS["qwen3"]
DIGITS = "[0-9]{3}"


# --- the text split ---------------------------------------------------------------------------------------


SPLITS = [
    # (format, prompt tail, output, thinking, answer)
    (R1, "<|im_start|>assistant\n", "let me see</think>42", "let me see", "42"),
    (R1, "assistant\n<think>\n", "<think>a < b</think>\n\nyes", "a < b", "\n\nyes"),  # a repeated opener is dropped
    (R1, "assistant\n", "still thinking </thi", "still thinking </thi", ""),  # never closed: all thinking
    (QWEN3, "assistant\n", "<think>hmm</think>ok", "hmm", "ok"),
    (QWEN3, "assistant\n", "  <think>x</think>y", "x", "y"),
    (QWEN3, "assistant\n", "<thinking is fun", None, "<thinking is fun"),  # not the marker: all answer
    (QWEN3, "assistant\n", "plain answer", None, "plain answer"),
    (QWEN3, "assistant\n<think>\n", "deep</think>done", "deep", "done"),  # the template opened thinking
    (QWEN3, "assistant\n<think>\n\n</think>\n\n", "<think>not thinking</think>", None,
     "<think>not thinking</think>"),  # thinking disabled: the prompt closed it, the output is all answer
]


@pytest.mark.parametrize(("fmt", "tail", "text", "thinking", "answer"), SPLITS)
def test_split_whole_and_streamed_in_every_cut(fmt, tail, text, thinking, answer):
    plan = ReasoningPlan.after(fmt, tail, True)
    assert split_reasoning(plan, text) == (thinking, answer)
    for a in range(len(text) + 1):  # every cut in two and three pieces: markers cut anywhere
        for b in range(a, len(text) + 1):
            splitter = plan.splitter()
            pieces = [splitter.feed(p) for p in (text[:a], text[a:b], text[b:])] + [splitter.flush()]
            assert "".join(p[0] for p in pieces) == (thinking or "")
            assert "".join(p[1] for p in pieces) == answer


def test_streamed_answer_never_shows_part_of_a_marker():
    splitter = ReasoningSplitter(R1, inside=True)
    shown = [splitter.feed(c) for c in "abc</think>xyz"]
    assert "".join(t for t, _ in shown) == "abc" and "".join(a for _, a in shown) == "xyz"
    assert all("<" not in a and ">" not in a for _, a in shown)


def test_unknown_parser_is_one_line_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown reasoning parser 'r2'; known: deepseek-r1, qwen3$"):
        reasoning_format("r2")
    out = subprocess.run([sys.executable, "-m", "sprig.runtime.cli", "serve", "--model", "demo", "--port", "0",
                          "--reasoning-parser", "r2"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
    assert "known: deepseek-r1, qwen3" in out.stderr and "Traceback" not in out.stderr


# --- the matcher --------------------------------------------------------------------------------------------


def _ids(info, text: str) -> list[int]:
    return list(info.tokenizer.encode(text, add_special_tokens=False).ids)


def _allowed(matcher, vocab: int) -> set[int]:
    mask = torch.full((1, (vocab + 31) // 32), -1, dtype=torch.int32)
    matcher.fill_bitmask(mask, 0)
    return {t for t in range(vocab) if (int(mask[0, t >> 5]) >> (t & 31)) & 1}


@pytest.fixture(scope="module")
def marker(info):
    return MarkerTokens.build("</think>", info.token_bytes, info.vocab_size)


def test_matcher_feeds_the_grammar_nothing_until_the_marker(info, compiler, marker):
    inner = matcher_for(compiler.compile(GrammarSpec.regex(DIGITS)))
    m = ThinkingMatcher(inner, marker, budget=None)
    thought = _ids(info, "x = 1 + 1, so it is two")  # letters: the regex alone would refuse them
    assert not inner.accept_token(thought[0]) and inner.state == m.inner.state
    assert m.accept_tokens(thought) and m.thinking
    end = _ids(info, "</think>")
    assert len(end) > 1  # the marker is cut into tokens: the state machine works on bytes
    assert m.accept_tokens(end) and not m.thinking
    assert _allowed(m, info.vocab_size) == _allowed(inner, info.vocab_size)  # the regex from here on
    letter = _ids(info, "x")[0]
    assert not m.accept_token(letter)
    assert m.accept_tokens(_ids(info, "123")) and m.is_terminated() is False
    # rollback crosses the marker back into thinking, exactly
    m.rollback(len(_ids(info, "123")) + 2)
    assert m.thinking and m.k == len(b"".join(info.token_bytes[t] for t in end[:-2]))  # "</thin" of "</think>"
    assert m.accept_tokens(end[-2:]) and not m.thinking


def test_a_token_that_runs_past_the_marker_is_refused_with_a_grammar():
    vocab = [None, b"</", b"think", b">", b">\n", b"</think>{", b"a", b"</think>"]  # a vocabulary with straddles
    marker = MarkerTokens.build("</think>", vocab, 40)
    with_grammar = ThinkingMatcher(object(), marker, budget=None)  # the inner matcher is never reached here
    assert 5 not in _allowed(with_grammar, 40) and not with_grammar.accept_token(5)  # "</think>{" at once
    assert with_grammar.accept_tokens([1, 2]) and with_grammar.k == len(b"</think")
    assert _allowed(with_grammar, 40) == set(range(40)) - {4, 5}  # ">\n" would run past the marker's end
    assert with_grammar.accept_token(3) and not with_grammar.thinking
    free = ThinkingMatcher(None, marker, budget=None)  # no grammar waits: the answer may start mid-token
    assert free.accept_tokens([6, 5]) and not free.thinking
    assert marker.forced(0) == [7] and marker.forced(len(b"</")) == [2, 3]  # the longest tokens that spell it


def test_budget_forces_the_marker_one_token_per_step(info, marker):
    m = ThinkingMatcher(None, marker, budget=3)
    assert m.accept_tokens(_ids(info, "abc def")[:3])
    forced = []
    while m.thinking:
        allowed = _allowed(m, info.vocab_size)
        assert len(allowed) == 1
        forced.append(allowed.pop())
        assert m.accept_token(forced[-1])
    assert b"".join(info.token_bytes[t] for t in forced) == b"</think>"
    assert len(_allowed(m, info.vocab_size)) == info.vocab_size  # free answer after the marker
    m.rollback(len(forced))
    assert _allowed(m, info.vocab_size) == {forced[0]}


# --- the engine ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", num_threads=1, random_seed=0,
                reasoning_parser="deepseek-r1") as e:
        yield e


def _thinking_tokens(engine, out: dict) -> int:
    text = engine.tokenizer.decode(out["output_ids"])
    assert text.count("</think>") == 1
    ids, n = out["output_ids"], 0
    while "</think>" not in engine.tokenizer.decode(ids[: n + 1]):
        n += 1
    return n + 1 - len(_ids_of(engine, "</think>"))


def _ids_of(engine, text: str) -> list[int]:
    return engine.tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("budget", [0, 1, 7])
def test_constraint_applies_after_the_forced_marker(engine, budget):
    out = engine.generate("Licensed under", {"max_new_tokens": 40, "temperature": 0, "regex": DIGITS,
                                             "max_thinking_tokens": budget}, require_reasoning=True)
    thinking, _, answer = out["text"].partition("</think>")
    assert re.fullmatch(DIGITS, answer), out["text"]
    assert len(engine.tokenizer.encode(thinking, add_special_tokens=False)) <= budget + 1
    if budget:
        assert not re.fullmatch("[0-9]*", thinking)  # the regex would have refused this thinking
    assert out["meta_info"]["finish_reason"]["type"] == "stop"


def test_unconstrained_budget_and_no_thinking_without_require_reasoning(engine):
    free = engine.generate("Licensed under", {"max_new_tokens": 12, "temperature": 0, "max_thinking_tokens": 3})
    assert free["text"].count("</think>") == 1 and free["meta_info"]["finish_reason"]["type"] == "length"
    plain = engine.generate("Licensed under", {"max_new_tokens": 12, "temperature": 0, "regex": DIGITS})
    assert re.fullmatch(DIGITS, plain["text"])  # no thinking phase asked for: the regex from the first token


@pytest.mark.parametrize("options", [{"disable_jump_forward": True}, {"speculative_algorithm": "ngram"},
                                     {"enable_overlap_schedule": True}])
def test_speculation_and_jump_forward_keep_the_same_output(tiny_paths, engine, options):
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                         "additionalProperties": False})
    prompt = 'one</think>{"a":12} two</think>{"a":12} three</think>{"a":12}'  # drafts run through the marker
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", num_threads=1, random_seed=0,
                reasoning_parser="deepseek-r1", **options) as other:
        for budget in (0, 3, 6):
            params = {"max_new_tokens": 60, "temperature": 0, "json_schema": schema, "max_thinking_tokens": budget}
            want = engine.generate(prompt, params, require_reasoning=True)
            assert other.generate(prompt, params, require_reasoning=True)["text"] == want["text"]
            jsonschema.validate(json.loads(want["text"].partition("</think>")[2]), json.loads(schema))  # 12.0 is an integer
        accepted = other.stats().get("spec_accepted_tokens", 0)
    assert accepted > 0 if "speculative_algorithm" in options else accepted == 0


def test_bad_thinking_input_names_the_field(tiny_paths, engine):
    with pytest.raises(SamplingParamsError) as e:
        engine.generate("x", {"max_thinking_tokens": -1})
    assert e.value.param == "max_thinking_tokens"
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", num_threads=1) as plain:
        with pytest.raises(RequestError) as e:
            plain.generate("x", {"max_thinking_tokens": 4})
        assert e.value.param == "max_thinking_tokens" and "--reasoning-parser" in str(e.value)
        with pytest.raises(RequestError) as e:
            plain.generate("x", {"regex": DIGITS}, require_reasoning=True)
        assert e.value.param == "require_reasoning"
    with pytest.raises(ValueError, match="known: deepseek-r1, qwen3"):
        Engine(str(tiny_paths["tiny-llama"]), reasoning_parser="o1")


# --- the server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--reasoning-parser", "deepseek-r1") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


CHAT = {"model": tiny_model(), "messages": [{"role": "user", "content": "What is 6 x 7?"}], "temperature": 0,
        "max_tokens": 40}


def test_chat_reasoning_content_whole_and_streamed(client):
    body = {**CHAT, "extra_body": {"max_thinking_tokens": 5, "regex": DIGITS}}
    whole = client.chat.completions.create(**body).choices[0]
    thinking = whole.message.reasoning_content  # type: ignore[attr-defined]
    assert thinking and re.fullmatch(DIGITS, whole.message.content), whole.message
    assert whole.finish_reason == "stop"
    chunks = list(client.chat.completions.create(**body, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    streamed_thinking = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    contents = [d.content for d in deltas if d.content]
    assert streamed_thinking == thinking and "".join(contents) == whole.message.content
    # thinking is streamed before the answer (how many deltas it takes depends on how fast the loop drains them)
    kinds = ["r" if getattr(d, "reasoning_content", None) else "c" for d in deltas
             if getattr(d, "reasoning_content", None) or d.content]
    assert kinds and kinds[0] == "r" and "".join(kinds).rstrip("c") == "r" * kinds.count("r"), kinds
    assert not any(c in "".join(contents) for c in "</>")
    held = client.chat.completions.create(**{**body, "extra_body": {**body["extra_body"], "stream_reasoning": False}},
                                          stream=True)
    held_thinking = [d.reasoning_content for c in held if c.choices  # type: ignore[attr-defined]
                     for d in [c.choices[0].delta] if getattr(d, "reasoning_content", None)]
    assert held_thinking == [thinking]  # SGLang's stream_reasoning false: one chunk once thinking is over
    off = client.chat.completions.create(**{**body, "extra_body": {**body["extra_body"], "separate_reasoning": False}})
    assert off.choices[0].message.content == thinking + "</think>" + whole.message.content


def test_generate_separate_reasoning(server):
    params = {"max_new_tokens": 30, "temperature": 0, "regex": DIGITS, "max_thinking_tokens": 4}
    body = {"text": "Question: 6 x 7?\nAnswer:", "sampling_params": params, "require_reasoning": True}
    raw = httpx.post(server.url + "/generate", json=body, timeout=60).json()
    split = httpx.post(server.url + "/generate", json={**body, "separate_reasoning": True}, timeout=60).json()
    assert raw["text"] == split["reasoning_text"] + "</think>" + split["text"]
    assert re.fullmatch(DIGITS, split["text"])
    with httpx.stream("POST", server.url + "/generate", json={**body, "separate_reasoning": True, "stream": True},
                      timeout=60) as resp:
        chunks = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
    assert chunks[-1]["text"] == split["text"] and chunks[-1]["reasoning_text"] == split["reasoning_text"]


def test_server_bad_input(server):
    resp = httpx.post(server.url + "/v1/chat/completions", json={**CHAT, "max_thinking_tokens": -1}, timeout=60)
    assert_openai_error(resp, 400, "max_thinking_tokens")
    resp = httpx.post(server.url + "/generate", json={"text": "x", "sampling_params": {"max_thinking_tokens": "9"}},
                      timeout=60)
    assert_openai_error(resp, 400, "max_thinking_tokens")
