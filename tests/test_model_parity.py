"""sprig's model code reproduces transformers' logits on the same checkpoint, over the paged KV pool.

The Gemma 1-3 and OLMo-2 checkpoints (`GEMMA_OLMO_CHECKPOINTS`) have a sliding window of 8 where their family has one, so
the extends after a 19- or 31-token prefix and the decode rows attend across it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from sprig.runtime.model.checkpoints import (
    FAMILY_CHECKPOINTS,
    GEMMA_OLMO_CHECKPOINTS,
    TINY_ARCHITECTURES,
    TINY_MOE_ARCHITECTURES,
    checkpoint_path,
)
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

TOL = 1e-4


@pytest.fixture(scope="module", params=[*TINY_ARCHITECTURES, *TINY_MOE_ARCHITECTURES, *GEMMA_OLMO_CHECKPOINTS,
                                                *FAMILY_CHECKPOINTS])
def models(request):
    path = checkpoint_path(request.param)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return hf, load_model(path, "float32")


def make_runner(model, page_size: int) -> ModelRunner:
    return ModelRunner(model, KVPool(model.cfg, PoolSize(2048 // page_size, page_size), torch.float32))


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, 2000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def pages_for(runner: ModelRunner, n_tokens: int) -> list[int]:
    return runner.pool.alloc(-(-n_tokens // runner.pool.page_size))


@pytest.mark.parametrize("page_size", [1, 16])
def test_prefill_logits_match_transformers(models, page_size):
    hf, model = models
    runner = make_runner(model, page_size)
    ids = random_ids(45, seed=1)
    out = runner.forward([SeqInput(ids, 0, pages_for(runner, 45), all_logits=True)])
    assert (out.logits - hf_logits(hf, ids)).abs().max().item() < TOL


@pytest.mark.parametrize("page_size", [1, 16])
def test_extend_after_cached_prefix_matches_full_sequence(models, page_size):
    hf, model = models
    runner = make_runner(model, page_size)
    ids = random_ids(50, seed=2)
    pages = pages_for(runner, 50)
    runner.forward([SeqInput(ids[:19], 0, pages)])
    out = runner.forward([SeqInput(ids[19:], 19, pages, all_logits=True)])
    assert (out.logits - hf_logits(hf, ids)[19:]).abs().max().item() < TOL


def test_mixed_batch_of_prefills_extends_and_decodes_matches(models):
    """Sequences of different lengths and stages in one forward each get their own correct logits."""
    hf, model = models
    runner = make_runner(model, 16)
    prompts = [random_ids(n, seed=n) for n in (5, 23, 40, 17)]
    full = [hf_logits(hf, p) for p in prompts]
    pages = [pages_for(runner, len(p)) for p in prompts]
    # Step 1: prompts 0 and 1 prefill fully; prompt 2 prefills its first 31 tokens; prompt 3 its first 9.
    runner.forward([SeqInput(prompts[0][:-1], 0, pages[0]), SeqInput(prompts[1][:-1], 0, pages[1]),
                    SeqInput(prompts[2][:31], 0, pages[2]), SeqInput(prompts[3][:9], 0, pages[3])])
    # Step 2: 0 and 1 decode their last prompt token, 2 and 3 extend the rest of their prompts.
    out = runner.forward([
        SeqInput(prompts[0][-1:], len(prompts[0]) - 1, pages[0]),
        SeqInput(prompts[1][-1:], len(prompts[1]) - 1, pages[1]),
        SeqInput(prompts[2][31:], 31, pages[2], all_logits=True),
        SeqInput(prompts[3][9:], 9, pages[3], all_logits=True),
    ])
    assert (out.last(0) - full[0][-1]).abs().max().item() < TOL
    assert (out.last(1) - full[1][-1]).abs().max().item() < TOL
    rows2 = out.logits[out.row_start[2] : out.row_start[2] + out.row_count[2]]
    rows3 = out.logits[out.row_start[3] : out.row_start[3] + out.row_count[3]]
    assert (rows2 - full[2][31:]).abs().max().item() < TOL
    assert (rows3 - full[3][9:]).abs().max().item() < TOL


def greedy_batch(runner: ModelRunner, prompts: list[list[int]], steps: int, eos: set[int]) -> list[list[int]]:
    """Batched greedy decoding straight on the runner: all prompts prefill together, then decode together."""
    pages = [pages_for(runner, len(p) + steps) for p in prompts]
    out = runner.forward([SeqInput(p, 0, pg) for p, pg in zip(prompts, pages, strict=True)])
    outputs = [[int(out.last(i).argmax())] for i in range(len(prompts))]
    for _ in range(steps - 1):
        live = [i for i, o in enumerate(outputs) if o[-1] not in eos and len(o) < steps]
        if not live:
            break
        seqs = [SeqInput([outputs[i][-1]], len(prompts[i]) + len(outputs[i]) - 1, pages[i]) for i in live]
        out = runner.forward(seqs)
        for j, i in enumerate(live):
            outputs[i].append(int(out.last(j).argmax()))
    return outputs


def test_greedy_continuations_equal_transformers_generate(models):
    hf, model = models
    runner = make_runner(model, 16)
    prompts = [random_ids(n, seed=100 + n) for n in (3, 11, 26, 60)]
    eos = set(model.cfg.eos_token_ids)
    ours = greedy_batch(runner, prompts, 32, eos)
    for prompt, got in zip(prompts, ours, strict=True):
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                              eos_token_id=list(eos), pad_token_id=0)[0, len(prompt):].tolist()
        assert got == ref
