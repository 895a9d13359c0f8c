"""Soak with speculation on: 2,000 randomized requests (greedy and sampled, stops, n=2, aborts from the caller)
on a tiny pool, and aborts that land while a request's drafts are being verified; afterwards every target page
is free or in the tree, nothing is locked, and the draft model's pool (when any) is whole again."""

from __future__ import annotations

import asyncio
import random

import pytest
from test_engine_soak import NUM_REQUESTS, soak

from sprig import Engine


def abort_during_verification(engine: Engine, rate: float, seed: int) -> dict[str, int]:
    """Make some forwards abort one of the requests whose drafts they are verifying (as a caller's abort would,
    had it landed mid-step); the engine retires it at the end of that step."""
    core = engine.core
    assert core.spec is not None
    rng = random.Random(seed)
    speculating: list = []
    hits = {"aborted_mid_verify": 0}
    propose, forward = core.spec.propose, core.runner.forward

    def propose_and_remember(reqs):
        drafts = propose(reqs)
        speculating[:] = list(drafts)
        return drafts

    def forward_and_abort(seqs):
        out = forward(seqs)
        if speculating and rng.random() < rate:
            victim = rng.choice(speculating)
            if not victim.finished:
                victim.abort("aborted during verification")
                hits["aborted_mid_verify"] += 1
        speculating.clear()
        return out

    core.spec.propose = propose_and_remember  # type: ignore[method-assign]
    core.runner.forward = forward_and_abort  # type: ignore[method-assign]
    return hits


@pytest.mark.parametrize("proposer", ["ngram", "draft"])
def test_soak_with_speculation_leaks_nothing(tiny_paths, proposer):
    path = str(tiny_paths["tiny-llama"])
    draft = {"speculative_draft_model_path": path} if proposer == "draft" else {}
    with Engine(path, dtype="float32", max_total_tokens=1024, page_size=16, chunked_prefill_size=128,
                max_running_requests=64, random_seed=0, num_threads=1, speculative_algorithm=proposer,
                **draft) as engine:
        hits = engine._call(lambda: abort_during_verification(engine, 0.05, seed=7))
        outcome = asyncio.run(soak(engine))
        s = engine.stats()
        proposer_obj = engine.core.spec.proposer
        draft_pool = getattr(proposer_obj, "pool", None)
        draft_free = (draft_pool.num_free_pages, draft_pool.size.num_pages) if draft_pool is not None else None
        tracked = engine._call(lambda: proposer_obj.num_tracked)
    print(f"soak {proposer}: {outcome}, {hits}, preemptions {s['num_preemptions']}, "
          f"{s['spec_verify_steps']} verifications, accept rate {s['spec_accept_rate']:.2f}, accept length {s['spec_accept_length']:.2f}")
    assert sum(outcome.values()) >= NUM_REQUESTS
    assert outcome["abort"] > 0 and outcome["length"] > 0 and outcome["stop"] > 0
    assert hits["aborted_mid_verify"] > 10
    # why 500: the back-off skips most of the random workload's hopeless tries (about 900 verifications remain)
    assert s["spec_verify_steps"] > 500 and s["spec_accepted_tokens"] > 0
    assert s["running"] == 0 and s["waiting"] == 0
    assert s["cache_protected_tokens"] == 0
    assert s["kv_free_tokens"] + s["cache_evictable_tokens"] == s["kv_total_tokens"]
    assert tracked == 0  # every request's proposer state was released
    if draft_free is not None:
        assert draft_free[0] == draft_free[1]
