"""Bad constraints fail fast, with a clear error, in bounded memory, and never hurt the next request.

Each case goes through the production path (compile workers in separate processes) and must come back as a
`GrammarError` with a stable code within 1 s. Most are caught before outlines-core runs: JSON and schema
validation, a nesting limit, a cap on regex size (character positions with counted repetitions multiplied
out) and a bounded subset construction for user patterns, which is where `(a|b)*a(a|b){40}` explodes. What
slips through is stopped by the worker's wall-clock timeout and address-space limit, after which the worker
is replaced.
"""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import pytest

from sprig import Engine
from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, TokenizerInfo
from sprig.grammar.llg.lark import spec_to_lark
from sprig.grammar.outlines.build import spec_to_regex

DEEP = 30_000
# why: each "date-time but not ending :NNZ" is a complement automaton turned back into a regex (~0.1 s each)
SLOW_SCHEMA = {"type": "object", "properties": {
    f"p{i}": {"type": "string", "format": "date-time", "not": {"pattern": f":{i:02d}Z$"}} for i in range(20)}}


def deep_schema_text() -> str:
    return '{"items":' * DEEP + "{}" + "}" * DEEP


CASES = {
    "invalid JSON": (GrammarSpec.json_schema('{"type": "object",'), "invalid_schema"),
    "NaN in schema": (GrammarSpec.json_schema('{"minimum": NaN}'), "invalid_schema"),
    "invalid schema (type)": (GrammarSpec.json_schema({"type": 5}), "invalid_schema"),
    "invalid schema (minLength)": (GrammarSpec.json_schema({"minLength": -1}), "invalid_schema"),
    "invalid schema (properties)": (GrammarSpec.json_schema({"properties": []}), "invalid_schema"),
    "invalid regex": (GrammarSpec.regex("(ab"), "invalid_regex"),
    "invalid pattern in schema": (GrammarSpec.json_schema({"pattern": "[a-"}), "invalid_regex"),
    "lookahead (not regular)": (GrammarSpec.regex("(?=a)a"), "invalid_regex"),
    "backreference (not regular)": (GrammarSpec.regex(r"(a)\1"), "invalid_regex"),
    "unsupported keyword": (GrammarSpec.json_schema({"type": "array", "uniqueItems": True}), "unsupported_keyword"),
    "$ref cycle": (GrammarSpec.json_schema({"$ref": "#"}), "invalid_schema"),
    "$ref cycle through allOf": (GrammarSpec.json_schema(
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}),
        "invalid_schema"),
    "remote $ref": (GrammarSpec.json_schema({"$ref": "https://example.com/schema.json"}), "unsupported_keyword"),
    "30,000-deep schema": (GrammarSpec.json_schema(deep_schema_text()), "grammar_too_complex"),
    "30,000-deep regex": (GrammarSpec.regex("(" * DEEP + "a" + ")" * DEEP), "grammar_too_complex"),
    "10^5-way regex alternation": (GrammarSpec.regex("|".join(f"w{i}" for i in range(10**5))), "grammar_too_complex"),
    "10^5 choices": (GrammarSpec.choices([f"w{i}" for i in range(10**5)]), "grammar_too_complex"),
    "10^5-value enum": (GrammarSpec.json_schema({"enum": [f"w{i}" for i in range(10**5)]}), "grammar_too_complex"),
    "10^4 anyOf branches": (GrammarSpec.json_schema({"anyOf": [{"const": i} for i in range(10**4)]}),
                            "grammar_too_complex"),
    "DFA explosion (a|b)*a(a|b){40}": (GrammarSpec.regex("(a|b)*a(a|b){40}"), "grammar_too_complex"),
    "DFA explosion in a property pattern": (GrammarSpec.json_schema(
        {"properties": {"p": {"type": "string", "pattern": "(a|b)*a(a|b){40}"}}}), "grammar_too_complex"),
    "x{1000000}": (GrammarSpec.regex("x{1000000}"), "grammar_too_complex"),
    "minimum 1e100000": (GrammarSpec.json_schema('{"minimum": 1e100000}'), "grammar_too_complex"),
    "minItems 10^6": (GrammarSpec.json_schema({"type": "array", "minItems": 10**6}), "grammar_too_complex"),
    "minLength 10^6": (GrammarSpec.json_schema({"type": "string", "minLength": 10**6}), "grammar_too_complex"),
    "10 MB schema": (GrammarSpec.json_schema('{"enum": [' + ",".join(['"' + "x" * 90 + '"'] * 110_000) + "]}"),
                     "grammar_too_complex"),
    "100,000-member enum of numbers": (GrammarSpec.json_schema({"enum": list(range(10**5))}), "grammar_too_complex"),
    "malformed GBNF": (GrammarSpec.ebnf('root ::= ( "a" | "b"'), "invalid_grammar"),
    "malformed Lark": (GrammarSpec.ebnf("start: (\n"), "invalid_grammar"),
    "GBNF 10^5-way alternation": (GrammarSpec.ebnf("root ::= " + "|".join(f'"{i}"' for i in range(10**5))),
                                  "grammar_too_complex"),
    "GBNF nested 30,000 deep": (GrammarSpec.ebnf("root ::= " + "(" * DEEP + '"a"' + ")" * DEEP), "grammar_too_complex"),
    "GBNF with 10^5 rules": (GrammarSpec.ebnf("root ::= r0\n" + "\n".join(f'r{i} ::= "x" r{i + 1}' for i in range(10**5))),
                             "grammar_too_complex"),
    "Lark 10^5-way alternation": (GrammarSpec.ebnf("start: " + "|".join(f'"{i}"' for i in range(10**5))),
                                  "grammar_too_complex"),
}
# Too big for one regex (refused by the outlines backend before it runs), but small as a grammar: the
# llguidance backend counts repetitions and recurses instead of copying, and compiles these in milliseconds.
GRAMMAR_ONLY = {  # (a minimum no generation can reach is refused on both: see CASES)
    # format x length: one regex needs the product automaton (it grows without bound, once 30-40 s); the
    # grammar backend hands llguidance the intersection of two lexemes, checked non-empty here
    "uri with maxLength 24": GrammarSpec.json_schema({"type": "string", "format": "uri", "maxLength": 24}),
    "hostname with maxLength 30": GrammarSpec.json_schema({"type": "string", "format": "hostname", "maxLength": 30}),
    # a negated format: the complement automaton turned back into a regex grows without bound; the grammar
    # backend hands llguidance one lexeme "any string & ~email", checked non-empty here (issue 33)
    "not an email": GrammarSpec.json_schema({"type": "string", "not": {"format": "email"}}),
    "maxItems 10^6": GrammarSpec.json_schema({"type": "array", "maxItems": 10**6}),
    "maxLength 10^6": GrammarSpec.json_schema({"type": "string", "maxLength": 10**6}),
    "deep recursion allowed by options": GrammarSpec.json_schema(
        {"$defs": {"t": {"type": "object", "properties": {"l": {"$ref": "#/$defs/t"}, "r": {"$ref": "#/$defs/t"}},
                         "additionalProperties": False}}, "$ref": "#/$defs/t"},
        JsonOptions(max_recursion_depth=40)),
}


@pytest.fixture(scope="module")
def compiler(tiny_paths):
    info = TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)
    with GrammarCompiler(info, max_workers=1, timeout_s=10.0, max_memory_bytes=1 << 30) as comp:
        comp.compile(GrammarSpec.regex("warm"))  # the worker's start-up is not part of any budget below
        yield comp


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_fails_fast_with_a_clear_error(compiler, name):
    spec, code = CASES[name]
    start = time.perf_counter()
    with pytest.raises(GrammarError) as err:
        compiler.compile(spec)
    elapsed = time.perf_counter() - start
    print(f"\n{name:40} {err.value.code:22} {elapsed * 1000:7.1f} ms  {err.value.message[:70]}")
    assert err.value.code == code, err.value.message
    assert err.value.param == spec.param
    assert elapsed < 1.0
    assert len(err.value.message) <= 300 and "/work" not in err.value.message and "0x" not in err.value.message


@pytest.mark.parametrize("name", list(GRAMMAR_ONLY))
def test_grammar_backend_compiles_what_a_regex_cannot(compiler, name):
    start = time.perf_counter()
    compiled = compiler.compile(GRAMMAR_ONLY[name])
    assert time.perf_counter() - start < 1.0 and compiled.nbytes < 4096
    with pytest.raises(GrammarError) as err:
        spec_to_regex(GRAMMAR_ONLY[name])
    assert err.value.code == "grammar_too_complex"


@pytest.mark.parametrize("translate", [spec_to_regex, spec_to_lark], ids=["regex", "grammar"])
@pytest.mark.parametrize("name", [n for n in CASES if "10^" in n or "30,000" in n or "explosion" in n])
def test_bad_input_memory_is_bounded(name, translate):
    spec, _ = CASES[name]
    tracemalloc.start()
    try:
        with pytest.raises(GrammarError):
            translate(spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20, f"{name}: {peak >> 20} MiB"


def test_deeply_nested_python_schema_is_refused_at_construction():
    schema: dict = {}
    for _ in range(DEEP):
        schema = {"items": schema}
    with pytest.raises(GrammarError) as err:
        GrammarSpec.json_schema(schema)
    assert err.value.code == "grammar_too_complex"


def test_errors_are_cached_and_the_worker_stays_usable(compiler):
    spec = GrammarSpec.regex("(a|b)*a(a|b){40}")
    for _ in range(3):
        with pytest.raises(GrammarError):
            compiler.compile(spec)
    assert compiler.stats()["cache_hits"] >= 2
    assert compiler.compile(GrammarSpec.regex("ok")).spec.spec == "ok"


def test_timeout_kills_the_worker_and_the_next_compile_works(tiny_paths):
    info = TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)
    with GrammarCompiler(info, max_workers=1, timeout_s=0.3, backend="outlines") as comp:
        comp.compile(GrammarSpec.regex("warm"))
        slow = GrammarSpec.json_schema(True, JsonOptions(any_value_depth=4))  # ~1.3 s in outlines-core
        start = time.perf_counter()
        with pytest.raises(GrammarError) as err:
            comp.compile(slow)
        assert err.value.code == "grammar_too_complex" and "longer than" in err.value.message
        assert time.perf_counter() - start < 1.0
        assert comp.compile(GrammarSpec.regex("after")).regex == "after"
        assert comp.stats()["timeouts"] == 1


def test_memory_limit_kills_the_worker_and_the_next_compile_works(tiny_paths):
    info = TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)
    with GrammarCompiler(info, max_workers=1, timeout_s=60, max_memory_bytes=160 << 20, backend="outlines") as comp:
        big = GrammarSpec.json_schema(True, JsonOptions(any_value_depth=5))  # an index of ~60 MB
        with pytest.raises(GrammarError) as err:
            comp.compile(big)
        assert err.value.code == "grammar_too_complex" and "memory" in err.value.message
        assert comp.compile(GrammarSpec.regex("after")).regex == "after"
        assert comp.stats()["worker_crashes"] == 1


def test_the_engine_serves_others_while_grammars_compile_or_fail(tiny_paths):
    """A slow grammar compiling and bad ones failing hold up neither each other nor unconstrained requests."""
    slow = {"json_schema": json.dumps(SLOW_SCHEMA), "max_new_tokens": 4}
    bad = [{"regex": "(a|b)*a(a|b){40}"}, {"json_schema": '{"type": "object",'}, {"regex": "(ab"},
           {"json_schema": json.dumps({"type": "array", "uniqueItems": True})},
           {"json_schema": deep_schema_text()}, {"regex": "|".join(f"w{i}" for i in range(10**5))}]

    async def timed(coro):
        start = time.perf_counter()
        try:
            return await coro, time.perf_counter() - start
        except Exception as exc:  # the request's error is the result here
            return exc, time.perf_counter() - start

    async def main(engine):
        slow_task = asyncio.ensure_future(timed(engine.async_generate("slow", slow)))
        await asyncio.sleep(0.05)
        errors = await asyncio.gather(*(timed(engine.async_generate("bad", b)) for b in bad))
        plain = await asyncio.gather(*(timed(engine.async_generate(f"p{i}", {"max_new_tokens": 16}))
                                       for i in range(4)))
        assert not slow_task.done(), "the slow grammar should still be compiling"
        return errors, plain, await slow_task

    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=8192, random_seed=0) as engine:
        engine.generate("warm", {"max_new_tokens": 2, "regex": "warm"})  # start the compile workers
        errors, plain, (slow_out, slow_s) = asyncio.run(main(engine))
    for (err, seconds), params in zip(errors, bad, strict=True):
        assert isinstance(err, ValueError) and seconds < 1.0, (str(params)[:60], err, seconds)
    assert all(out["meta_info"]["completion_tokens"] == 16 and seconds < 1.0 for out, seconds in plain)
    assert isinstance(slow_out, dict) and slow_out["text"].startswith("{"), slow_out  # it did compile, later
    assert slow_s > max(seconds for _, seconds in plain)
