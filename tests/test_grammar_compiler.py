"""The compiler the engine uses: futures, the bounded LRU cache, coalescing, stats, workers.

Keys are (kind, canonical spec, tokenizer fingerprint); the canonical form re-serializes JSON (so
whitespace does not matter) but keeps property order (which is the output order, so it does).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from sprig.grammar import (
    CompiledGrammar,
    CompiledLark,
    GrammarCompiler,
    GrammarError,
    GrammarKind,
    GrammarSpec,
    JsonOptions,
    TokenizerInfo,
)


@pytest.fixture(scope="module")
def info(tiny_paths) -> TokenizerInfo:
    return TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)


def test_canonical_key():
    a = GrammarSpec.json_schema('{"type": "object",  "properties": {"a": {}, "b": {}}}')
    b = GrammarSpec.json_schema({"type": "object", "properties": {"a": {}, "b": {}}})
    c = GrammarSpec.json_schema({"type": "object", "properties": {"b": {}, "a": {}}})
    assert a.canonical_key() == b.canonical_key() != c.canonical_key()
    assert a.canonical_key() != GrammarSpec.json_schema(b.spec, JsonOptions(strict=True)).canonical_key()
    assert GrammarSpec.regex("a").canonical_key() != GrammarSpec.choices(["a"]).canonical_key()
    assert GrammarSpec(GrammarKind.CHOICES, ["x", "y"]).spec == ("x", "y")


def test_submit_returns_a_future_and_caches(info):
    with GrammarCompiler(info, max_workers=1) as comp:
        spec = GrammarSpec.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
        future = comp.submit(spec)
        assert isinstance(future, Future)
        compiled = future.result(timeout=60)
        assert isinstance(compiled, CompiledLark) and compiled.compile_time_s > 0 and compiled.nbytes > 0
        again = comp.submit(GrammarSpec.json_schema('{"type":"object","properties":{"a":{"type":"integer"}}}'))
        assert again.done() and again.result() is compiled
        stats = comp.stats()
        assert stats["compiles"] == 1 and stats["cache_hits"] == 1 and stats["cache_entries"] == 1


def test_concurrent_requests_share_one_compilation(info):
    # why: outlines compiles take long enough that all five submissions overlap one compilation
    with GrammarCompiler(info, max_workers=2, isolate=False, backend="outlines") as comp:
        spec = GrammarSpec.json_schema(True, JsonOptions(any_value_depth=2))
        futures = [comp.submit(spec) for _ in range(5)]
        results = {id(f.result(timeout=60)) for f in futures}
        assert len(results) == 1 and comp.stats()["compiles"] == 1 and comp.stats()["coalesced"] >= 1


def test_lru_bounds_entries_and_bytes(info):
    with GrammarCompiler(info, max_workers=1, isolate=False, cache_entries=3) as comp:
        for word in ("a", "b", "c", "d", "e"):
            comp.compile(GrammarSpec.regex(word))
        stats = comp.stats()
        assert stats["cache_entries"] == 3 and stats["cache_evictions"] == 2
        comp.compile(GrammarSpec.regex("a"))  # evicted: compiled again
        assert comp.stats()["compiles"] == 6
    # why: outlines automata are large enough to exercise the byte bound
    with GrammarCompiler(info, max_workers=1, isolate=False, cache_bytes=40_000, backend="outlines") as comp:
        for n in range(10):
            comp.compile(GrammarSpec.regex(f"x{{{n + 1}}}y"))
            assert comp.stats()["cache_bytes"] <= 40_000
        big = comp.compile(GrammarSpec.json_schema(True))  # larger than the whole cache: served, not kept
        assert big.nbytes > 40_000 and comp.stats()["cache_bytes"] <= 40_000


def test_backends_are_selectable_and_keyed_apart(info):
    spec = GrammarSpec.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    with GrammarCompiler(info, max_workers=1, backend="outlines") as comp:
        assert isinstance(comp.submit(spec).result(timeout=60), CompiledGrammar)
    with pytest.raises(ValueError):
        GrammarCompiler(info, backend="xgrammar", isolate=False)


def test_a_storm_of_unique_schemas_keeps_the_cache_bounded(info):
    with GrammarCompiler(info, max_workers=2, isolate=False, cache_entries=64) as comp:
        for i in range(300):
            comp.compile(GrammarSpec.json_schema({"const": i}))
        assert comp.stats()["cache_entries"] == 64 and comp.stats()["compiles"] == 300


def test_many_threads_submitting(info):
    with GrammarCompiler(info, max_workers=2) as comp:
        out: dict[int, str] = {}

        def work(i: int) -> None:
            out[i] = comp.submit(GrammarSpec.regex(f"[a-z]{{{i}}}")).result(timeout=60).regex

        threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(out) == list(range(1, 9))


def test_errors_carry_the_request_field(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        for spec, param in [(GrammarSpec.regex("("), "regex"), (GrammarSpec.json_schema("{"), "json_schema"),
                            (GrammarSpec.choices([]), "choices")]:
            with pytest.raises(GrammarError) as err:
                comp.compile(spec)
            assert err.value.param == param


def test_stats_keys(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        assert set(comp.stats()) >= {"compiles", "compile_errors", "cache_hits", "cache_misses", "cache_entries",
                                     "cache_bytes", "cache_evictions", "compile_time_s_total",
                                     "compile_time_s_max", "timeouts", "worker_crashes", "coalesced"}


def test_a_cancelled_request_leaves_the_shared_compile_to_the_others(info):
    """Issue 15: a request timing out while its schema compiles used to cancel the future every other
    request for the same schema waited on (asyncio.wait_for around asyncio.wrap_future)."""
    import asyncio

    slow = GrammarSpec.json_schema({"type": "object", "properties": {  # ~2-3 s: negated-format automata
        f"p{i}": {"type": "string", "format": "date-time", "not": {"pattern": f":{i:02d}Z$"}} for i in range(20)}})

    async def main(comp: GrammarCompiler) -> object:
        first, second = comp.submit(slow), comp.submit(slow)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(first), timeout=0.05)
        assert first.cancelled() and not second.cancelled()
        return await asyncio.wait_for(asyncio.wrap_future(second), timeout=60)

    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        compiled = asyncio.run(main(comp))
        assert isinstance(compiled, CompiledLark) and comp.stats()["coalesced"] == 1
        assert comp.submit(slow).result(timeout=1) is compiled  # and it was cached for later requests
