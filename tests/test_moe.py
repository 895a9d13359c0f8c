"""Mixture-of-experts families (Mixtral, Qwen2-MoE, Qwen3-MoE) through the one decoder: config parsing, routing,
and engine-level consistency. Logit and greedy parity with transformers is in test_model_parity.py."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil

import pytest
import torch

from sprig import Engine
from sprig.kernels.moe import fused_moe, route
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.block_quant import BlockQuantLinear
from sprig.runtime.model.checkpoints import TINY_MOE_ARCHITECTURES, checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.decoder import Linear, SparseMoE
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.parallel import TPContext, check_divisible, local_config, shard_plan
from sprig.runtime.model.quantization import Fp8Linear, Int8Linear


@pytest.fixture(scope="module")
def moe_paths():
    return {name: checkpoint_path(name) for name in TINY_MOE_ARCHITECTURES}


def test_config_reads_each_family_s_moe_fields(moe_paths):
    mixtral = load_model_config(moe_paths["tiny-mixtral"]).moe
    qwen2 = load_model_config(moe_paths["tiny-qwen2-moe"]).moe
    qwen3 = load_model_config(moe_paths["tiny-qwen3-moe"]).moe
    assert mixtral is not None and qwen2 is not None and qwen3 is not None
    assert (mixtral.num_experts, mixtral.top_k, mixtral.intermediate_size, mixtral.renormalize) == (4, 2, 96, True)
    assert mixtral.sparse_layers == (0, 1) and not mixtral.has_shared_expert
    assert (qwen2.num_experts, qwen2.top_k, qwen2.renormalize, qwen2.shared_intermediate_size) == (6, 2, False, 80)
    assert qwen2.sparse_layers == (0, 2)  # mlp_only_layers [1]
    assert (qwen3.num_experts, qwen3.top_k, qwen3.renormalize) == (8, 3, True)
    assert qwen3.sparse_layers == (1, 3)  # decoder_sparse_step 2
    assert load_model_config(moe_paths["tiny-qwen2-moe"]).attention_bias  # Qwen2-MoE's qkv_bias
    assert load_model_config(moe_paths["tiny-qwen3-moe"]).qk_norm


def test_dense_and_sparse_layers_get_their_blocks(moe_paths):
    model = load_model(moe_paths["tiny-qwen3-moe"], "float32", attention_backend="torch")
    assert [isinstance(layer.mlp, SparseMoE) for layer in model.layers] == [False, True, False, True]
    qwen2 = load_model(moe_paths["tiny-qwen2-moe"], "float32", attention_backend="torch")
    assert all(layer.mlp.shared_expert is not None for layer in qwen2.layers if isinstance(layer.mlp, SparseMoE))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("num_experts_per_tok", 9, "num_experts_per_tok must be in [1, num_experts=8]"),
    ("num_experts", 0, "num_experts must be positive"),
    ("moe_intermediate_size", None, "malformed field"),
])
def test_bad_moe_fields_are_one_line_errors(moe_paths, tmp_path, field, value, message):
    folder = tmp_path / "m"
    shutil.copytree(moe_paths["tiny-qwen3-moe"], folder)
    raw = json.loads((folder / "config.json").read_text())
    raw["num_experts"] = raw.pop("num_local_experts")  # transformers saves Qwen3-MoE's count under Mixtral's name
    raw[field] = value
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[")) as info:
        load_model_config(folder)
    assert "\n" not in str(info.value)


def test_unsupported_architecture_lists_the_moe_families(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}))
    with pytest.raises(CheckpointError) as info:
        load_model_config(tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert all(a in text for a in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"))


def test_route_takes_softmax_then_top_k_and_renormalizes_only_when_asked():
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.0, 3.0, 3.5, 0.5]])
    probs = torch.softmax(logits, -1)
    weights, ids = route(logits, 2, renormalize=False)
    assert ids.tolist() == [[0, 2], [2, 1]]
    torch.testing.assert_close(weights, probs.gather(1, ids))
    renormed, same_ids = route(logits, 2, renormalize=True)
    assert torch.equal(same_ids, ids)
    torch.testing.assert_close(renormed, weights / weights.sum(-1, keepdim=True))


def test_fused_moe_reference_equals_a_dense_sum_over_every_expert():
    """Each token's output is the weighted sum of its top-k experts' SwiGLU MLPs (every expert computed densely)."""
    gen = torch.Generator().manual_seed(0)
    t, h, i, e, k = 9, 16, 24, 5, 2
    x, w13, w2 = (torch.randn(s, generator=gen) for s in ((t, h), (e, 2 * i, h), (e, h, i)))
    logits = torch.randn(t, e, generator=gen)
    weights, ids = route(logits, k, renormalize=True)
    gate, up = torch.einsum("th,eoh->teo", x, w13).chunk(2, dim=-1)
    every = torch.einsum("tei,ehi->teh", torch.nn.functional.silu(gate) * up, w2)
    expected = (every.gather(1, ids[..., None].expand(t, k, h)) * weights[..., None]).sum(1)
    torch.testing.assert_close(fused_moe(x, w13, w2, logits, k, True), expected, rtol=1e-5, atol=1e-5)


def make_prompts(seed: int = 0) -> list[tuple[list[int], int]]:
    """16 prompts sharing a few prefixes (radix-cache hits), varied lengths and output budgets."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, 2000) for _ in range(rng.randint(8, 40))] for _ in range(3)]
    return [(rng.choice(prefixes) + [rng.randrange(3, 2000) for _ in range(rng.randint(1, 20))], rng.randint(4, 16))
            for _ in range(16)]


@pytest.mark.parametrize("name", TINY_MOE_ARCHITECTURES)
def test_batched_and_radix_cached_output_equals_each_request_alone(moe_paths, name):
    prompts = make_prompts()
    params = [{"max_new_tokens": m, "temperature": 0, "ignore_eos": True} for _, m in prompts]
    path = str(moe_paths[name])
    with Engine(path, dtype="float32", max_total_tokens=4096, disable_radix_cache=True) as engine:
        alone = [engine.generate(input_ids=p, sampling_params=s)["output_ids"]
                 for (p, _), s in zip(prompts, params, strict=True)]
    with Engine(path, dtype="float32", max_total_tokens=4096) as engine:
        together = [r["output_ids"] for r in engine.generate(input_ids=[p for p, _ in prompts],
                                                             sampling_params=params)]
        assert engine.stats()["cached_tokens"] > 0
    assert together == alone


def test_shard_plan_splits_every_expert_s_channels(moe_paths):
    cfg = load_model_config(moe_paths["tiny-qwen2-moe"])  # experts 48, shared expert 80, dense MLP 128
    plans = [shard_plan(cfg, TPContext(r, 2)) for r in range(2)]
    assert [(p.expert_intermediate, p.expert_intermediate_start) for p in plans] == [(24, 0), (24, 24)]
    assert [(p.shared_intermediate, p.shared_intermediate_start) for p in plans] == [(40, 0), (40, 40)]
    local = local_config(cfg, plans[1])
    assert local.moe is not None and (local.moe.intermediate_size, local.moe.shared_intermediate_size) == (24, 40)
    with pytest.raises(ValueError, match="experts' MLP size"):
        check_divisible(dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, intermediate_size=47)), 2)


@pytest.mark.parametrize(("name", "split"), [("tiny-qwen2-moe", {"tp_size": 2}), ("tiny-mixtral", {"tp_size": 2}),
                                             ("tiny-qwen3-moe", {"pp_size": 3})],
                         ids=["tp2-qwen2-moe", "tp2-mixtral", "pp3-qwen3-moe"])
def test_tensor_and_pipeline_parallel_give_the_greedy_tokens_of_one_process(moe_paths, name, split):
    """Tensor parallelism splits every expert; a pipeline stage's layers keep their model-wide sparse/dense kind."""
    prompts = [p for p, _ in make_prompts(seed=1)[:4]]
    greedy = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}
    options = {"num_threads": 1, "max_total_tokens": 4096, "dtype": "float32"}
    with Engine(str(moe_paths[name]), **options) as engine:
        ref = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=greedy)]
    with Engine(str(moe_paths[name]), **split, **options) as engine:
        got = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=greedy)]
    assert got == ref


@pytest.mark.parametrize(("name", "quantization", "kind", "tol"), [
    ("tiny-qwen2-moe", "int8", Int8Linear, 0.03), ("tiny-qwen2-moe", "fp8", Fp8Linear, 0.12),
    ("tiny-qwen3-moe", "q8_0", BlockQuantLinear, 0.03), ("tiny-mixtral", "q4_0", BlockQuantLinear, 0.3),
])
def test_quantized_experts_run_per_expert_close_to_full_precision(moe_paths, name, quantization, kind, tol):
    """Each expert's linears are quantized like the dense ones (int8, fp8, GGML blocks) and the block's output stays
    within the format's error of the fp32 block's."""
    path = moe_paths[name]
    full = load_model(path, "float32", attention_backend="torch")
    quant = load_model(path, "float32", quantization=quantization)
    x = torch.randn(6, full.cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    blocks = [(a.mlp, b.mlp) for a, b in zip(full.layers, quant.layers, strict=True) if isinstance(a.mlp, SparseMoE)]
    for ref, got in blocks:
        assert got.experts.per_expert is not None
        assert all(isinstance(p.gate_up_proj, kind) and isinstance(p.down_proj, kind) for p in got.experts.per_expert)
        assert type(got.gate) is Linear and (got.shared_expert_gate is None or type(got.shared_expert_gate) is Linear)
        want, have = ref(x), got(x)
        assert (have - want).norm() / want.norm() < tol
    with Engine(str(path), dtype="float32", quantization=quantization, max_total_tokens=1024) as engine:
        out = engine.generate(input_ids=[5, 6, 7, 8], sampling_params={"max_new_tokens": 4, "temperature": 0})
    assert len(out["output_ids"]) >= 1
