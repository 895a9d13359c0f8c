"""Gemma, Gemma 2, Gemma 3 and OLMo-2 through the one decoder: the engine's batching, radix cache, chunked prefill
and parallelism over their sliding windows; norms against transformers' in bf16. Their logits and greedy output
against transformers are checked in `test_model_parity.py` (the same tests as the other families).

Each recipe (`checkpoints.RECIPES`) sets its family's parts so that leaving one out changes the logits: norms
perturbed away from 1 ((1 + w) vs w), soft-caps that bite, a sliding window of 8 under prompts up to 60 tokens,
query_pre_attn_scalar != head_dim, Gemma 3's local rope base apart from its scaled global rope. The engine tests
run the default CPU backend (C kernels where they take a layer) with the radix cache, chunked prefill and page size
1, whose prefixes and chunks are longer than the window.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

from sprig import Engine
from sprig.kernels.norm import rms_norm_fp32_scale
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.checkpoints import GEMMA_OLMO_CHECKPOINTS, checkpoint_path
from sprig.runtime.model.config import SUPPORTED_ARCHITECTURES, load_model_config


def _shared_prefix_prompts(n: int) -> list[list[int]]:
    """Prompts over a few prefixes of 20-40 tokens (longer than the window), so the radix cache reuses them."""
    rng = random.Random(0)
    prefixes = [[rng.randrange(3, 2000) for _ in range(rng.randint(20, 40))] for _ in range(3)]
    return [rng.choice(prefixes) + [rng.randrange(3, 2000) for _ in range(rng.randint(1, 12))] for _ in range(n)]


@pytest.mark.parametrize("name", GEMMA_OLMO_CHECKPOINTS)
def test_batched_cached_and_chunked_output_equals_each_request_alone(name):
    path = str(checkpoint_path(name))
    prompts = _shared_prefix_prompts(12)
    params = {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True}
    with Engine(path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True) as engine:
        alone = [engine.generate(input_ids=p, sampling_params=params)["output_ids"] for p in prompts]
    for options in ({}, {"chunked_prefill_size": 16}, {"page_size": 1, "chunked_prefill_size": 8}):
        with Engine(path, dtype="float32", max_total_tokens=4096, **options) as engine:
            results = engine.generate(input_ids=prompts, sampling_params=[params] * len(prompts))
            cached = engine.stats()["cached_tokens"]
        assert [r["output_ids"] for r in results] == alone, options
        assert cached > 0


@pytest.mark.parametrize("reference", [GemmaRMSNorm, Olmo2RMSNorm])
def test_fp32_scaled_norm_equals_transformers_in_bf16(reference):
    """Gemma's (1 + w) and OLMo-2's w scale in fp32 before the cast: bit-identical in bf16."""
    torch.manual_seed(0)
    norm = reference(256, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(256))
    norm = norm.to(torch.bfloat16)
    x = torch.randn(8, 256, dtype=torch.bfloat16) * 3
    weight = norm.weight.float() + (1.0 if reference is GemmaRMSNorm else 0.0)
    with torch.no_grad():
        assert torch.equal(rms_norm_fp32_scale(x, weight, 1e-6, x.dtype), norm(x))


def test_families_are_listed_in_the_unsupported_architecture_error(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    with pytest.raises(CheckpointError) as err:
        load_model_config(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert all(arch in message for arch in SUPPORTED_ARCHITECTURES)
    assert "Gemma2ForCausalLM" in message and "Olmo2ForCausalLM" in message


PARALLEL = {"num_threads": 1, "max_total_tokens": 4096, "dtype": "float32", "chunked_prefill_size": 16}
PARALLEL_PROMPTS = ["The quick brown fox jumps over the lazy dog and", "Once upon a time there was a tiny model that",
                    "a b c d e f g h i j k l m n o p"]


def _greedy_ids(path: str, **options: object) -> list[list[int]]:
    params = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}
    with Engine(path, **PARALLEL, **options) as engine:
        return [r["output_ids"] for r in engine.generate(PARALLEL_PROMPTS, params)]


@pytest.mark.parametrize(("name", "options"), [("tiny-gemma2", {"tp_size": 2}), ("tiny-gemma3", {"pp_size": 3})],
                         ids=["gemma2-tp2", "gemma3-pp3"])
def test_tensor_and_pipeline_parallel_give_the_greedy_tokens_of_one_process(name, options):
    """Gemma 3's pipeline stages each hold one layer: the windows and rope tables follow the global layer index."""
    path = str(checkpoint_path(name))
    assert _greedy_ids(path, **options) == _greedy_ids(path)


def test_olmo2_refuses_tensor_parallelism():
    with pytest.raises(ValueError, match="Olmo2ForCausalLM with tensor parallelism is not supported yet"):
        Engine(str(checkpoint_path("tiny-olmo2")), tp_size=2, **PARALLEL)


@pytest.fixture(scope="module")
def gemma3_multimodal(tmp_path_factory):
    """A tiny Gemma3ForConditionalGeneration whose language model is tiny-gemma3's, with a one-layer vision tower."""
    from transformers import AutoModelForCausalLM, Gemma3Config, Gemma3ForConditionalGeneration

    text = AutoModelForCausalLM.from_pretrained(checkpoint_path("tiny-gemma3"), dtype=torch.float32).eval()
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 28, "patch_size": 14}
    config = Gemma3Config(text_config=text.config.to_dict(), vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=2047, boi_token_index=2045, eoi_token_index=2046)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    model = Gemma3ForConditionalGeneration(config).eval()
    model.model.language_model.load_state_dict(text.model.state_dict())
    folder = tmp_path_factory.mktemp("tiny-gemma3-multimodal")
    model.save_pretrained(folder)
    return folder, model


def test_gemma3_multimodal_checkpoint_serves_its_language_model(gemma3_multimodal):
    """`gemma3` (Gemma3ForConditionalGeneration): the text config and the `language_model` weights are read, the
    vision tower's are skipped; the logits are transformers' on text-only input."""
    from sprig.runtime.model.kv_pool import KVPool, PoolSize
    from sprig.runtime.model.loader import load_model
    from sprig.runtime.model.runner import ModelRunner, SeqInput

    folder, hf = gemma3_multimodal
    model = load_model(folder, "float32")
    assert model.cfg.architecture == "Gemma3ForConditionalGeneration" and model.cfg.parts.local_rope_theta == 100.0
    runner = ModelRunner(model, KVPool(model.cfg, PoolSize(16, 16), torch.float32))
    ids = random.Random(3).sample(range(3, 2000), 40)
    out = runner.forward([SeqInput(ids, 0, runner.pool.alloc(3), all_logits=True)])
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0]
    assert (out.logits - ref).abs().max().item() < 1e-4
