"""The `sprig.Engine` API as docs/architecture.md specifies it: shapes of results, streaming, async, abort, errors."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from sprig import Engine
from sprig.runtime.errors import RequestError

GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=1024, random_seed=0) as e:
        yield e


def test_one_prompt_gives_a_dict_and_a_list_gives_a_list(engine):
    one = engine.generate("Licensed under", GREEDY)
    assert set(one) == {"text", "output_ids", "meta_info"}
    meta = one["meta_info"]
    assert meta["completion_tokens"] == len(one["output_ids"]) == 12
    assert meta["finish_reason"] == {"type": "length", "matched": None}
    assert meta["prompt_tokens"] == len(engine.tokenizer.encode("Licensed under"))
    many = engine.generate(["a", "b", "c"], GREEDY)
    assert isinstance(many, list) and len(many) == 3


def test_streamed_text_accumulates_to_the_final_text(engine):
    final = engine.generate("The Work", GREEDY)
    chunks = list(engine.generate("The Work", GREEDY, stream=True))
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert texts[-1] == final["text"] and chunks[-1]["output_ids"] == final["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def test_async_generate_and_async_stream(engine):
    async def main():
        res = await engine.async_generate("The Work", GREEDY)
        stream = await engine.async_generate("The Work", GREEDY, stream=True)
        last = None
        async for chunk in stream:
            last = chunk
        return res, last

    res, last = asyncio.run(main())
    assert res["output_ids"] == last["output_ids"]


def test_same_seed_same_output_whatever_the_batch(engine):
    params = {"max_new_tokens": 16, "temperature": 1.0, "seed": 42}
    alone = engine.generate("Copyright", params)["output_ids"]
    batch = engine.generate(["x y", "Copyright", "z"], [{"max_new_tokens": 9, "temperature": 1.0}, params,
                                                        {"max_new_tokens": 5, "temperature": 0.5}])
    assert batch[1]["output_ids"] == alone


def test_n_copies_share_the_prompt_through_the_tree(engine):
    prompt = list(range(100, 180))
    res = engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 4, "temperature": 1.0, "n": 4})
    assert len(res) == 4
    assert sum(r["meta_info"]["cached_tokens"] for r in res) >= 3 * 64  # three copies reuse the first's pages


def test_stop_string_and_stop_token(engine):
    base = engine.generate("The Work", GREEDY)
    word = base["text"][3:6]
    cut = engine.generate("The Work", {**GREEDY, "stop": [word]})
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": word}
    assert word not in cut["text"] and base["text"].startswith(cut["text"])
    tok = base["output_ids"][4]
    by_id = engine.generate("The Work", {**GREEDY, "stop_token_ids": [tok]})
    assert by_id["meta_info"]["finish_reason"] == {"type": "stop", "matched": tok}
    assert by_id["output_ids"] == base["output_ids"][:5]


def test_abort_mid_stream_frees_the_request(engine):
    stream = engine.generate("The Work", {"max_new_tokens": 500, "temperature": 0, "ignore_eos": True},
                             stream=True, rid="to-abort")
    next(stream)
    engine.abort("to-abort")
    last = list(stream)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    engine.abort("to-abort")  # idempotent
    engine.abort("never-existed")
    s = engine.stats()
    assert s["running"] == 0 and s["cache_protected_tokens"] == 0


def test_requests_that_can_never_fit_fail_at_once(engine):
    with pytest.raises(RequestError, match="context length") as e:
        engine.generate(input_ids=[5] * 2048, sampling_params=GREEDY)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(RequestError, match="whole pool"):
        engine.generate(input_ids=[5] * 100, sampling_params={"max_new_tokens": 1500})
    with pytest.raises(RequestError, match="outside"):
        engine.generate(input_ids=[5, engine.model_config.vocab_size])
    with pytest.raises(RequestError, match="empty"):
        engine.generate("")
    with pytest.raises(ValueError, match="temperature"):
        engine.generate("hi", {"temperature": float("nan")})
    with pytest.raises(ValueError, match="unknown sampling parameter"):
        engine.generate("hi", {"max_tokens": 3})


def test_one_failing_request_does_not_fail_the_batch(engine):
    """An exception in one request's stop check aborts that request; the others finish normally."""
    core = engine.core
    original = core.append_token

    def flaky(req, token, logprob, in_fill=False):
        if req.prompt_ids[:1] == [7]:
            raise RuntimeError("boom")
        return original(req, token, logprob, in_fill)

    core.append_token = flaky
    try:
        res = engine.generate(input_ids=[[7, 8, 9], [10, 11, 12]], sampling_params=GREEDY)
    finally:
        core.append_token = original
    assert res[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "internal error" in res[0]["meta_info"]["finish_reason"]["message"]
    assert res[1]["meta_info"]["finish_reason"]["type"] == "length"
    assert engine.stats()["request_errors"] >= 1


def test_logprobs_match_transformers(engine, tiny_paths):
    hf = AutoModelForCausalLM.from_pretrained(tiny_paths["tiny-llama"], dtype=torch.float32).eval()
    prompt = [11, 200, 301, 45, 1000, 77, 9, 5]
    res = engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 3, "temperature": 0},
                          return_logprob=True, logprob_start_len=2, top_logprobs_num=3)
    meta = res["meta_info"]
    full = prompt + res["output_ids"]
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([full])).logits[0], dim=-1)
    inputs = meta["input_token_logprobs"]
    assert [t for _, t in inputs] == prompt[2:]
    for k, (lp, tok) in enumerate(inputs):
        assert abs(lp - ref[1 + k, tok].item()) < 1e-4
    for k, (lp, tok) in enumerate(meta["output_token_logprobs"]):
        assert abs(lp - ref[len(prompt) - 1 + k, tok].item()) < 1e-4
        top = meta["output_top_logprobs"][k]
        assert len(top) == 3 and top[0][1] == tok  # greedy picks the most likely token


def test_stats_snapshot(engine):
    s = engine.stats()
    for key in ("running", "waiting", "tokens_per_step", "kv_usage", "cached_tokens", "cache_hit_rate",
                "num_preemptions"):
        assert key in s
    assert s["kv_free_tokens"] + s["cache_evictable_tokens"] + s["cache_protected_tokens"] == s["kv_total_tokens"]


def test_max_new_tokens_zero_only_prefills(engine):
    res = engine.generate(input_ids=[11, 200, 301, 45], sampling_params={"max_new_tokens": 0},
                          return_logprob=True, logprob_start_len=1)
    assert res["output_ids"] == [] and res["meta_info"]["completion_tokens"] == 0
    assert res["meta_info"]["finish_reason"]["type"] == "length"
    assert [t for _, t in res["meta_info"]["input_token_logprobs"]] == [200, 301, 45]
