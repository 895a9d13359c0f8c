"""Tensor parallelism on CPU with gloo: `tp_size=2` gives the greedy tokens of `tp_size=1`, through `Engine` and
`sprig serve`; a rank that dies ends every rank, the engine reports it, and `sprig serve` exits non-zero."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from test_server_helpers import child_pids, process_alive, wait_serving

from sprig import Engine
from sprig.runtime.distributed.tp_protocol import decode_step, encode_step
from sprig.runtime.model.checkpoints import RECIPES, checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.parallel import TPContext, check_divisible, shard_plan
from sprig.runtime.model.runner import SeqInput

OPTIONS = {"num_threads": 1, "max_total_tokens": 4096, "dtype": "float32", "chunked_prefill_size": 64}
PROMPTS = ["The quick brown fox", "Once upon a time there was a tiny model that", "a b c d e f g h i j k l",
           "The quick brown fox jumps over"]
GREEDY = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}


def _generate(path: Path, tp_size: int, **extra: object) -> tuple[list[dict], Engine]:
    engine = Engine(str(path), tp_size=tp_size, **OPTIONS, **extra)
    out = engine.generate(PROMPTS, GREEDY, return_logprob=True, logprob_start_len=0)
    return out, engine


# --- pure pieces ----------------------------------------------------------------------------------------------------
def test_shard_plan_splits_heads_and_replicates_kv_heads(tiny_paths):
    cfg = load_model_config(tiny_paths["tiny-llama"])  # 4 heads, 2 KV heads, vocab 2100
    plans = [shard_plan(cfg, TPContext(r, 2)) for r in range(2)]
    assert [(p.heads, p.head_start, p.kv_heads, p.kv_head_start) for p in plans] == [(2, 0, 1, 0), (2, 2, 1, 1)]
    assert [(p.vocab_start, p.vocab_rows, p.vocab_real) for p in plans] == [(0, 1050, 1050), (1050, 1050, 1050)]
    four = [shard_plan(cfg, TPContext(r, 4)) for r in range(4)]
    assert [(p.heads, p.kv_heads, p.kv_head_start) for p in four] == [(1, 1, 0), (1, 1, 0), (1, 1, 1), (1, 1, 1)]
    odd = dataclasses.replace(cfg, vocab_size=2101)
    last = shard_plan(odd, TPContext(1, 2))
    assert (last.vocab_start, last.vocab_rows, last.vocab_real) == (1051, 1051, 1050)
    with pytest.raises(ValueError, match="attention heads"):
        check_divisible(cfg, 3)


def test_step_encoding_round_trips():
    seqs = [SeqInput([5, 6, 7], 0, [3]), SeqInput([9], 17, [3, 4], all_logits=True), SeqInput(list(range(40)), 16,
                                                                                           [1, 2, 8, 9])]
    assert decode_step(encode_step(seqs)) == [SeqInput(list(s.token_ids), s.prefix_len, list(s.pages),
                                                       s.all_logits) for s in seqs]


def test_bad_tp_size_is_refused_before_any_process_starts(tiny_paths):
    with pytest.raises(ValueError, match="tp_size 3 must divide"):
        Engine(str(tiny_paths["tiny-llama"]), tp_size=3, **OPTIONS)


# --- engines --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "overlap"), [("tiny-llama", False), ("tiny-qwen3", True)],
                         ids=["tiny-llama", "tiny-qwen3-overlap"])
def test_tp2_engine_gives_the_greedy_tokens_of_tp1(tiny_paths, name, overlap):
    """Also with the overlap schedule on the TP engine (the side thread schedules while rank 0 broadcasts)."""
    ref, e1 = _generate(tiny_paths[name], 1)
    e1.shutdown()
    got, e2 = _generate(tiny_paths[name], 2, enable_overlap_schedule=overlap)
    try:
        assert [r["output_ids"] for r in got] == [r["output_ids"] for r in ref]
        assert [r["text"] for r in got] == [r["text"] for r in ref]
        for a, b in zip(got, ref, strict=True):  # prompt logprobs: the all-rows logits path through the gather
            lp_a = torch.tensor([x[0] for x in a["meta_info"]["input_token_logprobs"][1:]])
            lp_b = torch.tensor([x[0] for x in b["meta_info"]["input_token_logprobs"][1:]])
            assert torch.allclose(lp_a, lp_b, atol=1e-4)
        again = e2.generate(PROMPTS[3], GREEDY)  # served from the prefix cache this time
        assert again["output_ids"] == ref[3]["output_ids"] and again["meta_info"]["cached_tokens"] > 0
        workers = [p.pid for p in e2.core.tp.procs]
    finally:
        e2.shutdown()
    assert not any(process_alive(pid) for pid in workers)


def test_padded_vocab_and_a_rank_killed_mid_generation(tmp_path_factory):
    # An odd vocabulary (padded shard) with one KV head (replicated on both ranks).
    recipe = dataclasses.replace(RECIPES["tiny-mistral"], name="tiny-mistral-v2101", vocab_size=2101)
    path = checkpoint_path(recipe)
    ref, e1 = _generate(path, 1)
    e1.shutdown()
    got, engine = _generate(path, 2)
    assert [r["output_ids"] for r in got] == [r["output_ids"] for r in ref]
    worker = engine.core.tp.procs[0].pid
    try:
        stream = engine.generate("a long one", {"max_new_tokens": 2000, "ignore_eos": True}, stream=True)
        next(stream)
        os.kill(worker, signal.SIGKILL)
        last = list(stream)[-1]
        assert last["meta_info"]["finish_reason"]["type"] == "abort"
        assert "engine failure" in last["meta_info"]["finish_reason"]["message"]
        deadline = time.monotonic() + 10
        while engine.is_alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not engine.is_alive
        assert "tensor-parallel rank 1" in engine.loop_error and "SIGKILL" in engine.loop_error
        with pytest.raises(RuntimeError, match="not running"):
            engine.generate("x", GREEDY)
    finally:
        engine.shutdown()
    assert not process_alive(worker)


# --- sprig serve ----------------------------------------------------------------------------------------------------
def _start_server(path: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "sprig.runtime.cli", "serve", "--model", str(path), "--tp-size", "2", "--port", "0",
           "--num-threads", "1", "--max-total-tokens", "4096", "--dtype", "float32"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    return proc, wait_serving(proc)


def test_sprig_serve_tp2_matches_tp1_and_exits_when_a_rank_dies(tiny_paths):
    path = tiny_paths["tiny-llama"]
    with Engine(str(path), **OPTIONS) as e1:
        ids = e1.tokenizer.encode(PROMPTS[1])
        ref = e1.generate(input_ids=ids, sampling_params=GREEDY)
        ref_text = e1.generate(PROMPTS[0], GREEDY)["text"]
    proc, url = _start_server(path)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            native = client.post("/generate", json={"input_ids": ids, "sampling_params": GREEDY}).json()
            assert native["output_ids"] == ref["output_ids"]
            body = {"model": "default", "prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0, "ignore_eos": True}
            assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == ref_text
            workers = child_pids(proc.pid)
            assert len(workers) == 1
            os.kill(workers[0], signal.SIGKILL)
            deadline = time.monotonic() + 10
            status = 200
            while status == 200 and time.monotonic() < deadline:
                time.sleep(0.1)
                status = client.get("/health").status_code
            assert status == 503
        assert proc.wait(timeout=60) == 1
        assert "tensor-parallel rank 1" in proc.stderr.read()
        assert not process_alive(workers[0])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
