"""Speculative decoding, greedy: token-identical to plain decoding for every proposer, batch size, cache state,
preemption, grammar constraint and tensor parallelism, with the KV pool's accounting exact afterwards.

The tiny random-weight models fall into loops within a few dozen tokens, and the prompts here quote themselves,
so the n-gram proposer proposes and the target keeps many drafts: each test asserts that speculation actually
ran and kept tokens, so none of them can pass with speculation silently off.
"""

from __future__ import annotations

import random

import pytest

from sprig import Engine
from sprig.runtime.engine.spec.adaptive import HISTORY, MAX_PAUSE, AcceptanceHistory, DraftLength
from sprig.runtime.engine.spec.ngram import NgramIndex

NUM_PROMPTS = 32
GREEDY_LEN = 28


def copy_prompts(vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """Prompts that repeat a random passage (copy-heavy) or are random, some sharing prefixes."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab) for _ in range(24)]
    prompts = []
    for i in range(NUM_PROMPTS):
        passage = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 20))]
        head = shared if i % 3 == 0 else []
        body = passage * rng.randint(2, 3) + passage[: rng.randint(0, len(passage))] if i % 2 == 0 else passage
        prompts.append((head + body, rng.randint(4, GREEDY_LEN)))
    return prompts


def greedy(m: int) -> dict:
    return {"max_new_tokens": m, "temperature": 0, "ignore_eos": True}


def run_batched(engine: Engine, prompts: list[tuple[list[int], int]], batch: int) -> list[list[int]]:
    out: list[list[int]] = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        results = engine.generate(input_ids=[p for p, _ in chunk], sampling_params=[greedy(m) for _, m in chunk])
        out += [r["output_ids"] for r in results]
    return out


def assert_pool_exact(stats: dict) -> None:
    assert stats["running"] == 0 and stats["waiting"] == 0
    assert stats["cache_protected_tokens"] == 0
    assert stats["kv_free_tokens"] + stats["cache_evictable_tokens"] == stats["kv_total_tokens"]


@pytest.fixture(scope="module")
def reference(tiny_paths):
    """Every prompt alone, no speculation, no cache."""
    path = str(tiny_paths["tiny-qwen3"])
    with Engine(path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True, num_threads=1) as engine:
        prompts = copy_prompts(engine.tokenizer.vocab_size)
        alone = run_batched(engine, prompts, 1)
    return path, prompts, alone


# --- pieces ------------------------------------------------------------------------------------------------------
def test_ngram_index_copies_the_latest_longest_match_and_continues_loops():
    index = NgramIndex(1, 3)
    tokens = [5, 6, 7, 8, 9, 6, 7, 1, 5, 6, 7]
    index.update(tokens)
    assert index.propose(tokens, 2) == [8, 9]  # "6 7" was last followed by 1, but the longer "5 6 7" by 8 wins
    tokens = [5, 6, 7, 8, 9, 6, 7, 1, 6, 7]
    fresh = NgramIndex(1, 3)
    fresh.update(tokens)
    assert fresh.propose(tokens, 3) == [1, 6, 7]  # the 3-gram "1 6 7" is new; the 2-gram's latest copy wins
    loop = [3, 4, 3, 4]
    fresh = NgramIndex(2, 2)
    fresh.update(loop)
    assert fresh.propose(loop, 5) == [3, 4, 3, 4, 3]  # the copy runs into the present and keeps the period
    assert fresh.propose([9, 9, 8], 3) == []
    grown = loop + [3]
    fresh.update(grown)  # incremental: only the new n-grams are added
    assert fresh.propose(grown, 2) == [4, 3]


def test_draft_length_backs_off_geometrically_and_recovers():
    length = DraftLength(4)
    assert length.next_k() == 4
    pauses = []
    for _ in range(6):
        length.record(length.k, 0)
        pauses.append(length.pause)
        while length.next_k() == 0:
            pass
    assert pauses == [1, 4, 16, 64, 64, 64] and MAX_PAUSE == 64
    length.record(1, 1)
    assert length.next_pause == 1 and length.k == 2
    assert DraftLength(4, adaptive=False).next_k() == 4


def test_new_requests_start_short_while_the_engine_keeps_no_draft():
    history = AcceptanceHistory()
    for _ in range(HISTORY - 1):
        history.record(0)
    assert history.start(4, adaptive=True).k == 4  # too little evidence yet
    history.record(0)
    cautious = history.start(4, adaptive=True)
    assert (cautious.next_k(), cautious.next_k()) == (1, 1)
    cautious.record(1, 0)
    assert cautious.pause == 16  # where a request fully rejected twice would pause
    cautious.record(1, 1)  # a kept token ends the caution, as for any request
    assert cautious.next_pause == 1 and cautious.k == 2
    assert history.start(4, adaptive=False).k == 4
    history.record(2)  # one verification that kept a token: new requests start at full length again
    assert history.start(4, adaptive=True).k == 4


# --- greedy identity ---------------------------------------------------------------------------------------------
def proposer_options(name: str, tiny_paths: dict) -> dict:
    """Engine keywords of a proposer: n-gram, the target as its own draft (all kept), another model (few kept)."""
    if name == "ngram":
        return {"speculative_algorithm": "ngram"}
    draft = tiny_paths["tiny-qwen3"] if name == "draft-self" else tiny_paths["tiny-mistral"]
    return {"speculative_algorithm": "draft", "speculative_draft_model_path": str(draft)}


PROPOSERS = ["ngram", "draft-self", "draft-other"]


@pytest.mark.parametrize("proposer", PROPOSERS)
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_greedy_is_token_identical(reference, tiny_paths, proposer, batch):
    path, prompts, alone = reference
    with Engine(path, dtype="float32", max_total_tokens=8192, speculative_num_draft_tokens=4, num_threads=1,
                **proposer_options(proposer, tiny_paths)) as engine:
        assert run_batched(engine, prompts, batch) == alone
        stats = engine.stats()
        draft_pool = getattr(engine.core.spec.proposer, "pool", None)
        if draft_pool is not None:  # every request left: the draft model's pages are all back
            assert draft_pool.num_free_pages == draft_pool.size.num_pages
    assert stats["spec_verify_steps"] > 20, stats
    if proposer == "draft-self":
        assert stats["spec_accept_rate"] > 0.95  # the same model drafts what the target picks (fp32 ties aside)
    elif proposer == "ngram":
        assert stats["spec_accepted_tokens"] > 20
    assert stats["cached_tokens"] > 0  # the radix cache was on and used
    assert_pool_exact(stats)


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_greedy_survives_forced_preemption(reference, tiny_paths, proposer):
    path, prompts, alone = reference
    with Engine(path, dtype="float32", max_total_tokens=256, page_size=16, chunked_prefill_size=64,
                schedule_conservativeness=0.0, speculative_num_draft_tokens=6, speculative_disable_adaptive=True,
                num_threads=1, **proposer_options(proposer, tiny_paths)) as engine:
        assert run_batched(engine, prompts, NUM_PROMPTS) == alone
        stats = engine.stats()
    assert stats["num_preemptions"] > 0
    assert stats["spec_verify_steps"] > 0
    assert_pool_exact(stats)


def test_draft_model_with_another_tokenizer_is_refused(tiny_paths):
    from sprig.runtime.model.checkpoints import checkpoint_path

    with pytest.raises(ValueError, match="speculative_draft_model_path .* tokenizer differs"):
        Engine(str(tiny_paths["tiny-qwen3"]), speculative_algorithm="draft",
               speculative_draft_model_path=str(checkpoint_path("demo")))


def test_meta_info_reports_verifications(reference):
    path, prompts, _ = reference
    loop_prompt = prompts[0][0]
    with Engine(path, dtype="float32", max_total_tokens=2048, speculative_algorithm="ngram", num_threads=1) as engine:
        meta = engine.generate(input_ids=loop_prompt, sampling_params=greedy(24))["meta_info"]
        stats = engine.stats()
    assert meta["spec_verify_ct"] >= 1
    assert 1.0 <= meta["spec_accept_length"] <= 5.0
    assert stats["spec_accept_length"] == pytest.approx(meta["spec_accept_length"])
    assert 0.0 <= stats["spec_accept_rate"] <= 1.0
    with Engine(path, dtype="float32", max_total_tokens=2048, num_threads=1) as engine:
        plain = engine.generate(input_ids=loop_prompt, sampling_params=greedy(4))["meta_info"]
    assert "spec_verify_ct" not in plain


@pytest.mark.parametrize(("bad", "field"), [
    ({"speculative_algorithm": "eagle"}, "speculative_algorithm"),
    ({"speculative_algorithm": "ngram", "speculative_num_draft_tokens": 0}, "speculative_num_draft_tokens"),
    ({"speculative_algorithm": "draft"}, "speculative_draft_model_path"),
    ({"speculative_draft_model_path": "x"}, "speculative_draft_model_path"),
    ({"speculative_ngram_min_match_window_size": 3, "speculative_ngram_max_match_window_size": 2},
     "speculative_ngram_max_match_window_size"),
])
def test_bad_speculative_options_name_the_field(tiny_paths, bad, field):
    with pytest.raises(ValueError, match=field):
        Engine(str(tiny_paths["tiny-qwen3"]), **bad)


@pytest.mark.parametrize("proposer", ["ngram", "draft-self"])
def test_greedy_is_token_identical_through_tensor_parallelism(reference, tiny_paths, proposer):
    """TP=2 target (the draft model, when any, runs unsharded beside rank 0) gives the single-process tokens."""
    path, prompts, alone = reference
    with Engine(path, dtype="float32", max_total_tokens=4096, tp_size=2, num_threads=1, chunked_prefill_size=64,
                **proposer_options(proposer, tiny_paths)) as engine:
        assert run_batched(engine, prompts[:12], 12) == alone[:12]
        stats = engine.stats()
    assert stats["spec_accepted_tokens"] > 0
    assert_pool_exact(stats)


def test_draft_model_with_a_smaller_vocabulary_and_a_failing_proposer(tiny_paths):
    """tiny-llama pads its vocabulary to 2,100 rows; the tiny-qwen3 draft has 2,048: ids beyond it reach the draft
    as a placeholder. A proposer that raises costs drafts, never requests."""
    target = str(tiny_paths["tiny-llama"])
    prompts = [[2050, 2099, 7, 8, 2050, 2099, 7, 8, 2050], [5, 6, 2070, 5, 6, 2070, 5]]
    sp = greedy(24)
    with Engine(target, dtype="float32", max_total_tokens=4096, num_threads=1) as engine:
        plain = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=sp)]
    with Engine(target, dtype="float32", max_total_tokens=4096, num_threads=1, speculative_algorithm="draft",
                speculative_draft_model_path=str(tiny_paths["tiny-qwen3"])) as engine:
        assert [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=sp)] == plain
        assert engine.stats()["spec_verify_steps"] > 0

        def broken(reqs, ks):
            raise RuntimeError("proposer bug")

        engine.core.spec.proposer.propose_batch = broken
        assert [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=sp)] == plain
        stats = engine.stats()
    assert stats["spec_proposer_errors"] > 0
    assert_pool_exact(stats)
