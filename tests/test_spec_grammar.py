"""Speculative decoding under grammar constraints: greedy output is token-identical with and without speculation
(json_schema, regex, choices; jump-forward on and off), every output is valid, and drafts the grammar refuses
never reach the target.

With jump-forward on, forced text is appended by the grammar and the step after it is an extend, so drafts cover
the model's free choices; with it off, forced tokens are sampled one by one and the n-gram proposer drafts them,
which is where speculation and grammars meet most (the walk through the matcher fills each position's mask).
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from sprig import Engine
from sprig.grammar import GrammarCompiler, GrammarSpec, TokenizerInfo, matcher_for
from sprig.runtime.engine.spec.speculator import walk_grammar

ITEMS = {"type": "array", "minItems": 2, "maxItems": 4, "items": {
    "type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "tag": {"enum": ["red", "green", "blue"]},
                                     "ok": {"type": "boolean"}},
    "required": ["id", "tag", "ok"], "additionalProperties": False}}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "city": {"enum": ["Paris", "Lima", "Oslo"]}},
          "required": ["name", "city"], "additionalProperties": False}
REGEX = r"(ab|cd){3,6}-[0-9]{2,4}"
CHOICES = ["alpha beta gamma", "alpha beta delta", "omega"]
PROMPTS = ['[{"id": 1, "tag": "red", "ok": true}, {"id": 2, "tag": "red", "ok": true}]',
           '{"name": "Ada", "city": "Oslo"} {"name": "Ada", "city": "Oslo"}', "abababab-12 cdcd-34", "alpha beta"]


def cases() -> list[tuple[str, dict, object]]:
    out: list[tuple[str, dict, object]] = []
    for prompt in PROMPTS:
        out.append((prompt, {"json_schema": json.dumps(ITEMS)}, ITEMS))
        out.append((prompt, {"json_schema": json.dumps(PERSON)}, PERSON))
        out.append((prompt, {"regex": REGEX}, re.compile(REGEX)))
        out.append((prompt, {"choices": CHOICES}, CHOICES))
    return out


def check(text: str, finish: str, oracle: object) -> None:
    if finish != "stop":
        return  # a length-capped output is a prefix; the grammar tests cover that case
    if isinstance(oracle, dict):
        jsonschema.validate(json.loads(text), oracle)
    elif isinstance(oracle, re.Pattern):
        assert oracle.fullmatch(text), text
    else:
        assert text in oracle


@pytest.mark.parametrize("proposer", ["ngram", "draft"])
@pytest.mark.parametrize("jump_forward", [True, False], ids=["jump-forward", "no-jump-forward"])
def test_constrained_greedy_is_token_identical(tiny_paths, jump_forward, proposer):
    work = cases()
    outputs = {}
    target = str(tiny_paths["tiny-llama"])
    draft = {"speculative_draft_model_path": target} if proposer == "draft" else {}  # the target drafts for itself
    for algo in (None, proposer):
        with Engine(target, dtype="float32", max_total_tokens=16384, num_threads=1,
                    disable_jump_forward=not jump_forward, speculative_algorithm=algo,
                    **(draft if algo else {})) as engine:
            results = engine.generate([p for p, _, _ in work],
                                      [{"max_new_tokens": 48, "temperature": 0, **c} for _, c, _ in work])
            outputs[algo] = [(r["output_ids"], r["text"], r["meta_info"]["finish_reason"]["type"]) for r in results]
            if algo is not None:
                s = engine.stats()
                # measured kept drafts: ngram 9 / 86 (jump-forward on / off); the draft model drafts unmasked: few
                least = 30 if proposer == "ngram" and not jump_forward else 1
                assert s["spec_accepted_tokens"] >= least, s
                assert s["kv_free_tokens"] + s["cache_evictable_tokens"] == s["kv_total_tokens"]
    assert outputs[proposer] == outputs[None]
    finished = 0
    for (_, text, finish), (_, _, oracle) in zip(outputs[proposer], work, strict=True):
        check(text, finish, oracle)
        finished += finish == "stop"
    assert finished >= len(work) // 2


def test_walk_grammar_cuts_at_the_first_refused_draft_and_restores_the_matcher(tiny_paths):
    info = TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)
    with GrammarCompiler(info, max_workers=1, isolate=False) as compiler:
        compiled = compiler.compile(GrammarSpec.regex("abcabc"))
    matcher = matcher_for(compiled)
    tokenizer = info.tokenizer
    assert tokenizer is not None
    good = tokenizer.encode("abc", add_special_tokens=False).ids
    bad = tokenizer.encode("x", add_special_tokens=False).ids
    state = matcher.state
    kept, bitmask = walk_grammar(matcher, good + bad + good, 2100)
    assert kept == good
    assert matcher.state == state  # rolled back to where it started
    assert bitmask.shape[0] == len(good) + len(bad) + len(good) + 1
    for j, tok in enumerate(good):  # row j allows draft j (the state after the drafts before it)
        assert (int(bitmask[j, tok // 32]) >> (tok % 32)) & 1
    row = len(good)  # the refused draft's row: the state after "abc", which does not allow "x"
    assert not (int(bitmask[row, bad[0] // 32]) >> (bad[0] % 32)) & 1
