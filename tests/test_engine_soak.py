"""Soak: 2,000 randomized requests on a tiny pool all finish or abort, and no KV slot leaks (with the host tier
too: no device or host page is lost or owned twice)."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from sprig import Engine
from sprig.runtime.model.kv_pool import slot_pages

NUM_REQUESTS = 2000


def random_request(rng: random.Random, prefixes: list[list[int]], vocab: int) -> dict:
    head = rng.choice(prefixes)[: rng.randint(0, 80)]
    prompt = head + [rng.randrange(3, vocab) for _ in range(rng.randint(1, 30))]
    params: dict = {"max_new_tokens": rng.randint(1, 40), "temperature": rng.choice([0.0, 0.7, 1.0])}
    if rng.random() < 0.3:
        params["stop"] = [rng.choice(["a", "e", "th", " the", "\n"])]
    if rng.random() < 0.2:
        params["stop_token_ids"] = [rng.randrange(3, vocab)]
    if rng.random() < 0.1 and params["temperature"] > 0:
        params["n"] = 2
    return {"input_ids": prompt, "sampling_params": params}


async def run_one(engine: Engine, rng: random.Random, i: int, spec: dict, stats: dict) -> None:
    rid = f"soak-{i}"
    abort = rng.random() < 0.1
    task = asyncio.ensure_future(engine.async_generate(**spec, rid=rid))
    if abort:
        await asyncio.sleep(rng.random() * 0.2)
        engine.abort(rid)
        if spec["sampling_params"].get("n", 1) > 1:
            engine.abort(f"{rid}-0")
            engine.abort(f"{rid}-1")
    result = await task
    for r in result if isinstance(result, list) else [result]:
        stats[r["meta_info"]["finish_reason"]["type"]] += 1


async def soak(engine: Engine) -> dict:
    rng = random.Random(1234)
    vocab = engine.tokenizer.vocab_size
    prefixes = [[rng.randrange(3, vocab) for _ in range(80)] for _ in range(8)]
    stats = {"stop": 0, "length": 0, "abort": 0}
    tasks = []
    for i in range(NUM_REQUESTS):
        tasks.append(asyncio.ensure_future(run_one(engine, rng, i, random_request(rng, prefixes, vocab), stats)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # arrivals spread over time
    await asyncio.gather(*tasks)
    return stats


def assert_every_page_has_one_owner(engine: Engine) -> None:
    """At idle, each device page is free xor held by one tree node; each host page likewise (tree or free)."""
    core = engine.core
    nodes = core.tree._nodes()
    device = slot_pages(np.concatenate([n.value for n in nodes if n.on_device] or [np.empty(0, np.int64)]), 16)
    free = [p for p in range(core.pool.size.num_pages) if core.pool._is_free[p]]
    assert sorted(device + free) == list(range(core.pool.size.num_pages))
    host = core.kv.host
    if host is not None:
        copies = [n.host_value for n in nodes if n.host_value is not None]
        held = slot_pages(np.concatenate(copies or [np.empty(0, np.int64)]), 16)
        free = [p for p in range(host.pool.num_pages) if host.pool._is_free[p]]
        assert sorted(held + free) == list(range(host.pool.num_pages))
        assert all(n.host_value is not None for n in nodes if not n.on_device)


HICACHE = {"enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_swap_min_tokens": 32}


@pytest.mark.parametrize("options", [{}, HICACHE, {"enable_overlap_schedule": True}],
                         ids=["device-only", "host-tier", "overlap"])
def test_soak_finishes_everything_and_leaks_nothing(tiny_paths, options):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=1024, page_size=16,
                chunked_prefill_size=128, max_running_requests=64, random_seed=0, **options) as engine:
        outcome = asyncio.run(soak(engine))
        s = engine.stats()
        assert_every_page_has_one_owner(engine)
    print(f"soak outcome {outcome}; preemptions {s['num_preemptions']} {s['preemptions_by_mode']}, cache hit "
          f"rate {s['cache_hit_rate']:.2f}, host hits {s['hicache_host_hit_tokens']}, "
          f"fallbacks {s['hicache_fallbacks']}")
    assert sum(outcome.values()) >= NUM_REQUESTS
    assert outcome["abort"] > 0 and outcome["length"] > 0 and outcome["stop"] > 0
    assert s["running"] == 0 and s["waiting"] == 0
    assert s["cache_protected_tokens"] == 0
    assert s["kv_free_tokens"] + s["cache_evictable_tokens"] + s["cache_protected_tokens"] == s["kv_total_tokens"]
    if options is HICACHE:
        assert s["hicache_host_hit_tokens"] > 0 and s["hicache_offloaded_tokens"] > 0
        assert s["hicache_host_cached_tokens"] + s["hicache_host_free_tokens"] == s["hicache_host_total_tokens"]
