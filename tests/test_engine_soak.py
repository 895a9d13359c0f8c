"""Soak: 2,000 randomized requests on a tiny pool all finish or abort, and no KV slot leaks."""

from __future__ import annotations

import asyncio
import random

from sprig import Engine

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


def test_soak_finishes_everything_and_leaks_nothing(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=1024, page_size=16,
                chunked_prefill_size=128, max_running_requests=64, random_seed=0) as engine:
        outcome = asyncio.run(soak(engine))
        s = engine.stats()
    print(f"soak outcome {outcome}; preemptions {s['num_preemptions']}, cache hit rate {s['cache_hit_rate']:.2f}")
    assert sum(outcome.values()) >= NUM_REQUESTS
    assert outcome["abort"] > 0 and outcome["length"] > 0 and outcome["stop"] > 0
    assert s["running"] == 0 and s["waiting"] == 0
    assert s["cache_protected_tokens"] == 0
    assert s["kv_free_tokens"] + s["cache_evictable_tokens"] + s["cache_protected_tokens"] == s["kv_total_tokens"]
