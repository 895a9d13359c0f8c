"""Greedy fp32 output does not depend on batch composition, cache state, chunk size or preemption, with the KV cache
in the model dtype or quantized (int8 / fp8 codes: quantization is per token, so the same inputs store the same
bytes), nor on whether evicted or preempted KV went through the host tier, nor on the overlap schedule."""

from __future__ import annotations

import random

import pytest

from sprig import Engine

NUM_REQUESTS = 64


def make_prompts(tokenizer_vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """64 prompts sharing a few random prefixes, with varied lengths and output budgets."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, tokenizer_vocab) for _ in range(rng.randint(8, 60))] for _ in range(6)]
    prompts = []
    for _ in range(NUM_REQUESTS):
        head = rng.choice(prefixes) if rng.random() < 0.7 else []
        tail = [rng.randrange(3, tokenizer_vocab) for _ in range(rng.randint(1, 40))]
        prompts.append((head + tail, rng.randint(1, 24)))
    return prompts


def run_together(engine: Engine, prompts) -> list[list[int]]:
    params = [{"max_new_tokens": m, "temperature": 0, "ignore_eos": True} for _, m in prompts]
    results = engine.generate(input_ids=[p for p, _ in prompts], sampling_params=params)
    return [r["output_ids"] for r in results]


@pytest.fixture(scope="module", params=["auto", "int8", "fp8_e4m3", "fp8_e5m2"])
def reference(request, tiny_paths):
    """Each request run alone on a fresh engine with the cache disabled (for one --kv-cache-dtype)."""
    path = str(tiny_paths["tiny-qwen3"])
    kv = request.param
    with Engine(path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True,
                kv_cache_dtype=kv) as engine:
        prompts = make_prompts(engine.tokenizer.vocab_size)
        alone = [
            engine.generate(input_ids=p, sampling_params={"max_new_tokens": m, "temperature": 0,
                                                          "ignore_eos": True})["output_ids"]
            for p, m in prompts
        ]
    return path, prompts, alone, kv


@pytest.mark.parametrize(
    "options",
    [
        {"max_total_tokens": 8192},
        {"max_total_tokens": 8192, "disable_radix_cache": True},
        {"max_total_tokens": 8192, "chunked_prefill_size": 16},
        {"max_total_tokens": 8192, "chunked_prefill_size": 4096},
        {"max_total_tokens": 8192, "page_size": 1},
        {"max_total_tokens": 8192, "chunked_prefill_size": 32, "disable_mixed_chunk": True},
        {"max_total_tokens": 8192, "enable_overlap_schedule": True},
        {"max_total_tokens": 8192, "chunked_prefill_size": 16, "page_size": 1, "enable_overlap_schedule": True},
    ],
    ids=["cache", "no-cache", "chunk16", "chunk4096", "page1", "alternating", "overlap", "overlap-chunk16-page1"],
)
def test_batched_output_equals_each_request_alone(reference, options):
    path, prompts, alone, kv = reference
    with Engine(path, dtype="float32", kv_cache_dtype=kv, **options) as engine:
        assert run_together(engine, prompts) == alone
        stats = engine.stats()
    assert stats["kv_free_tokens"] + stats["cache_evictable_tokens"] + stats["cache_protected_tokens"] == \
        stats["kv_total_tokens"]
    if not options.get("disable_radix_cache"):
        assert stats["cached_tokens"] > 0


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlap"])
def test_output_survives_preemption(reference, overlap):
    """A pool too small for all 64 requests at once forces preemption; outputs stay identical, also when the
    overlap schedule preempts requests whose step is still running."""
    path, prompts, alone, kv = reference
    with Engine(path, dtype="float32", max_total_tokens=512, page_size=16, chunked_prefill_size=64,
                schedule_conservativeness=0.0, kv_cache_dtype=kv, enable_overlap_schedule=overlap) as engine:
        assert run_together(engine, prompts) == alone
        stats = engine.stats()
    assert stats["num_preemptions"] > 0
    assert stats["kv_free_tokens"] + stats["cache_evictable_tokens"] == stats["kv_total_tokens"]


def test_output_survives_eviction_through_the_host_tier(reference):
    """A pool far smaller than the prompts: prefixes are evicted to the host tier and loaded back; outputs stay
    identical, and the tier was really used."""
    path, prompts, alone, kv = reference
    with Engine(path, dtype="float32", max_total_tokens=256, page_size=16, chunked_prefill_size=64,
                kv_cache_dtype=kv, enable_hierarchical_cache=True, hicache_ratio=16) as engine:
        assert [engine.generate(input_ids=p, sampling_params={"max_new_tokens": m, "temperature": 0,
                                                              "ignore_eos": True})["output_ids"]
                for p, m in prompts] == alone
        stats = engine.stats()
    assert stats["hicache_offloaded_tokens"] > 0 and stats["hicache_host_hit_tokens"] > 0
    assert stats["kv_free_tokens"] + stats["cache_evictable_tokens"] == stats["kv_total_tokens"]


def test_output_survives_swap_preemption(reference):
    """Preempted requests swap their KV to the host tier and load it back on resume; outputs stay identical."""
    path, prompts, alone, kv = reference
    with Engine(path, dtype="float32", max_total_tokens=512, page_size=16, chunked_prefill_size=64,
                schedule_conservativeness=0.0, kv_cache_dtype=kv, enable_hierarchical_cache=True,
                hicache_ratio=8, hicache_swap_min_tokens=0) as engine:
        assert run_together(engine, prompts) == alone
        stats = engine.stats()
    assert stats["preemptions_by_mode"]["swap"] > 0
    assert stats["hicache_loaded_tokens"] > 0
    assert stats["kv_free_tokens"] + stats["cache_evictable_tokens"] == stats["kv_total_tokens"]
