"""The LM head writes fp32 logits on every path, so greedy decoding follows fp32 where bf16 would tie.

A bf16 logit between 32 and 64 has a spacing of 0.25: SmolLM2's 34.53 vs 34.33 ('users' vs 'id') became a tie that
the argmax gave to the lower id. Here a tiny-llama is rigged so every position's LM-head input is exactly ones
(all embedding rows ones, the final norm's weight ones, o_proj and down_proj zero, so no layer adds anything) and
two head rows sum to 39.9375 (LOW, the lower id) and 40.0625 (HIGH): 0.125 apart, both 40.0 in bf16. Every path
must pick HIGH at every step: the head's kernels (vector paths, AMX, torch), recorded CPU graphs, the extend
kernel over a cached prefix, speculative verification, tensor and pipeline parallelism, and the sampler's paths
(plain argmax, bias / penalties / grammar masks on a float32 copy, logprobs).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from kernel_paths import needs_kernels, path_params
from safetensors.torch import load_file, save_file

from sprig import Engine
from sprig.kernels.cpu_argmax import argmax_rows
from sprig.kernels.cpu_gemm import VecIsa, amx_linear, vec_linear, vnni_pack
from sprig.kernels.cpu_native import amx_available, native_kernels
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.decoder import LOGITS_DTYPE
from sprig.runtime.model.linear import Linear

LOW, HIGH = 500, 501  # " are", " under": the bf16 tie goes to LOW, fp32 says HIGH
LOW_ROW = (32.0, 7.9375)  # sums 39.9375; every value is a bf16, so the fp32 sums are exact
HIGH_ROW = (32.0, 8.0, 0.0625)  # sums 40.0625
HIDDEN, VOCAB = 64, 2100  # tiny-llama's
BEST = VecIsa(native_kernels().vec_gemm_best_isa()) if native_kernels() is not None else None
GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
PROMPT = list(range(3, 40))


def _rig_head(weight: torch.Tensor) -> torch.Tensor:
    """A [VOCAB, HIDDEN] head whose rows LOW and HIGH give the near-tie on an input of ones; the rest stay small."""
    weight = weight.clone()
    weight[LOW].zero_()
    weight[HIGH].zero_()
    weight[LOW, : len(LOW_ROW)] = torch.tensor(LOW_ROW)
    weight[HIGH, : len(HIGH_ROW)] = torch.tensor(HIGH_ROW)
    return weight


def test_the_rigged_rows_tie_in_bf16_and_not_in_fp32():
    """The premise: the two sums are 0.125 apart in fp32 and equal once rounded to bf16."""
    low, high = sum(LOW_ROW), sum(HIGH_ROW)
    assert high - low == 0.125 and torch.tensor(low).bfloat16() == torch.tensor(high).bfloat16()


@pytest.fixture(scope="module")
def rigged(tmp_path_factory) -> Path:
    """tiny-llama rigged as the module docstring says (its tokenizer and config unchanged)."""
    folder = tmp_path_factory.mktemp("rigged-tiny-llama")
    source = checkpoint_path("tiny-llama")
    for f in source.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, folder / f.name)
    weights = load_file(str(source / "model.safetensors"))
    for name, t in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = torch.zeros_like(t)
    weights["model.embed_tokens.weight"] = torch.ones_like(weights["model.embed_tokens.weight"])
    weights["model.norm.weight"] = torch.ones_like(weights["model.norm.weight"])
    weights["lm_head.weight"] = _rig_head(weights["lm_head.weight"] * 0.1)
    save_file(weights, str(folder / "model.safetensors"))
    return folder


# --- the head's kernels -------------------------------------------------------------------------------------------
def _head_case() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    weight = _rig_head(torch.randn(VOCAB, HIDDEN, generator=g) * 0.02).bfloat16()
    return torch.ones(3, HIDDEN, dtype=torch.bfloat16), weight


@pytest.mark.parametrize("isa", path_params(VecIsa, BEST))
def test_vector_kernel_writes_fp32_logits_that_keep_the_margin(isa):
    x, weight = _head_case()
    logits = vec_linear(x, vnni_pack(weight), None, isa, VOCAB, out_dtype=torch.float32)
    assert logits.dtype == torch.float32
    assert logits[:, HIGH].tolist() == [40.0625] * 3 and logits[:, LOW].tolist() == [39.9375] * 3
    assert argmax_rows(logits).tolist() == [HIGH] * 3
    rounded = vec_linear(x, vnni_pack(weight), None, isa, VOCAB)  # the bf16 output ties, and LOW wins
    assert rounded.dtype == torch.bfloat16 and argmax_rows(rounded).tolist() == [LOW] * 3


@pytest.mark.skipif(not amx_available(), reason="this CPU (or kernel) offers no AMX bf16 tiles")
def test_amx_kernel_writes_fp32_logits_that_keep_the_margin():
    x, weight = _head_case()
    weight = weight[:2080]  # AMX takes whole 32-column panels
    logits = amx_linear(x, vnni_pack(weight), None, torch.float32)
    assert logits.dtype == torch.float32 and argmax_rows(logits).tolist() == [HIGH] * 3


@pytest.mark.parametrize("packed", [True, False], ids=["sprig-kernel", "torch"])
def test_the_lm_head_linear_writes_logits_dtype_on_each_kernel(packed, monkeypatch):
    """A `Linear` built as the model builds its head: sprig's kernel where it packs, else the weight widened to
    fp32 for F.linear (what the loader does where no sprig kernel takes it), else widened per call."""
    if not packed:
        monkeypatch.setenv("SPRIG_CPU_ISA", "none")
        monkeypatch.setenv("SPRIG_AMX", "0")
    x, weight = _head_case()
    head = Linear(HIDDEN, VOCAB, False, torch.bfloat16, LOGITS_DTYPE)
    head.weight.data.copy_(weight)
    assert argmax_rows(head(x)).tolist() == [HIGH] * 3  # not packed yet: widened per call
    kernel = head.pack_for_cpu()
    if not packed:
        head.widen_weight()
    assert (kernel.value != "torch") == (packed and native_kernels() is not None)
    logits = head(x)
    assert logits.dtype == LOGITS_DTYPE and argmax_rows(logits).tolist() == [HIGH] * 3


# --- whole engines ------------------------------------------------------------------------------------------------
ENGINE_OPTIONS = {"dtype": "bfloat16", "num_threads": 1, "max_total_tokens": 1024, "random_seed": 0}
CASES = {
    "graphs": {},
    "eager": {"disable_cuda_graph": True},
    "torch-attention": {"attention_backend": "torch"},
    "ngram-verify": {"speculative_algorithm": "ngram"},
}


def _engine_picks(path: Path, **options) -> list[list[int]]:
    """Greedy tokens of: a prompt, the same prompt again (its prefix from the radix cache: the extend kernel), a
    row with a logit bias elsewhere and a penalty (the sampler's float32 copy), and a regex row (grammar mask)."""
    with Engine(str(path), **{**ENGINE_OPTIONS, **options}) as engine:
        first = engine.generate(input_ids=PROMPT, sampling_params=GREEDY, return_logprob=True, top_logprobs_num=2)
        again = engine.generate(input_ids=PROMPT + [50], sampling_params=GREEDY)
        assert again["meta_info"]["cached_tokens"] >= 32
        biased = engine.generate(input_ids=PROMPT[:20], sampling_params={
            **GREEDY, "logit_bias": {"7": 1.0}, "frequency_penalty": 0.0001})
        constrained = engine.generate(input_ids=PROMPT[:10], sampling_params={**GREEDY, "regex": "( are| under)+"})
        tops = first["meta_info"]["output_top_logprobs"][0]
        assert [tops[0][1], tops[1][1]] == [HIGH, LOW] and tops[0][0] - tops[1][0] == pytest.approx(0.125, abs=1e-3)
        return [first["output_ids"], again["output_ids"], biased["output_ids"], constrained["output_ids"][:1]]


@needs_kernels
@pytest.mark.parametrize("case", list(CASES))
def test_greedy_bf16_engine_follows_the_fp32_logits(rigged, case, monkeypatch):
    picks = _engine_picks(rigged, **CASES[case])
    assert all(set(p) == {HIGH} for p in picks), picks


@needs_kernels
@pytest.mark.parametrize("cap", ["avx2", "portable", "none"])
def test_every_vector_path_and_the_torch_head_follow_the_fp32_logits(rigged, cap, monkeypatch):
    monkeypatch.setenv("SPRIG_CPU_ISA", cap)  # none: the head's weight widened to fp32 for F.linear
    picks = _engine_picks(rigged)
    assert all(set(p) == {HIGH} for p in picks), picks


@pytest.mark.parametrize("parallel", [{"tp_size": 2}, {"pp_size": 2}], ids=["tp2", "pp2"])
def test_tensor_and_pipeline_parallel_engines_follow_the_fp32_logits(rigged, parallel):
    """The gathered vocab shards (tp) and the logits sent back from the last stage (pp) stay fp32."""
    with Engine(str(rigged), **{**ENGINE_OPTIONS, **parallel}) as engine:
        out = engine.generate(input_ids=[PROMPT, PROMPT[:9]], sampling_params=GREEDY)
    assert [set(o["output_ids"]) for o in out] == [{HIGH}, {HIGH}]
