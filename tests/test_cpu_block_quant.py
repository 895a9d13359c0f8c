"""GGML block-quantized linears and embedding lookups in C (kernels/csrc/block_quant.c) against the fp32 reference
(the `gguf`-exact dequantized weight times the activations), in every code path this machine can run.

The bound, per output y = sum_i w_i x_i: the kernel turns each block of 32 activations into codes c and residual
codes l with a scale xs = max|x| / 127, x ~= xs (c + l / 128), so |x_i - xs (c_i + l_i / 128)| <= xs / 256 (two
rints), plus a float32 rounding or two of x * 127 / max|x| (1% of that at most); the integer sums are exact and
the decoded weight is exact. Hence
    |y_kernel - y_ref| <= 1.01 sum_blocks (xs_b / 256) sum_{i in b} |w_i|  +  1e-5 sum_i |w_i x_i|  (+ 2^-8 |y| for bf16)
where the second term covers the float32 additions (a few thousand terms at most, each exact to 2^-24 relative)
and the third the bf16 output rounding. A wrong code, scale or offset breaks it by orders of magnitude, and so
would llama.cpp's q8_0 (c alone: an error up to xs / 2). At prefill sizes with bf16 activations the AVX-512 path
widens the weights to bf16 instead (activations exact, each weight rounded to 2^-9 relative): its error is
2^-9 sum_i |w_i x_i| plus the float sums, checked against that bound.
"""

from __future__ import annotations

import pytest
import torch
from kernel_paths import needs_kernels, path_params
from test_ggml_quants import random_rows

from sprig.kernels.cpu_block_quant import KERNEL_TYPES, bq_embedding, bq_linear, bq_supports
from sprig.kernels.cpu_int8 import Int8Isa, int8_isa
from sprig.kernels.cpu_native import native_kernels
from sprig.kernels.ggml_quants import GGMLType, dequantize

BEST = Int8Isa(native_kernels().bq_best_isa()) if native_kernels() is not None else None
ISAS = path_params(Int8Isa, BEST)
BLOCK_32 = (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0)
K_QUANTS = (GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K)


def _bound(x: torch.Tensor, w: torch.Tensor, ref: torch.Tensor, bf16_out: bool, widened: bool = False) -> torch.Tensor:
    """The module docstring's bound on |kernel - reference| per output [m, n]."""
    xb = x.float().view(x.shape[0], -1, 32)
    half_step = xb.abs().amax(dim=2) / 127 / 256  # [m, blocks]
    wabs = w.abs().view(w.shape[0], -1, 32).sum(dim=2)  # [n, blocks]
    wx = x.float().abs() @ w.abs().T
    bound = torch.maximum(half_step @ wabs.T * 1.01, wx * 2**-9 if widened else torch.zeros_like(wx)) + 1e-5 * wx
    return bound + (ref.abs() * 2**-8 if bf16_out else 0)


def _check(qtype: GGMLType, m: int, n: int, k: int, isa: Int8Isa, dtype: torch.dtype = torch.bfloat16,
           bias: bool = False, seed: int = 0, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    raw = random_rows(qtype, n, k, seed)
    w = dequantize(raw, qtype, k)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    out = bq_linear(x, raw, qtype, b, isa, out_dtype)
    ref = x.float() @ w.T + (0 if b is None else b.float())
    assert out.dtype == (out_dtype or dtype) and out.shape == (m, n)
    widened = dtype == torch.bfloat16 and m >= 8 and isa is Int8Isa.AVX512_VNNI  # the bf16-widened prefill path
    excess = (out.float() - ref).abs() - _bound(x, w, ref, out.dtype == torch.bfloat16, widened)
    assert excess.max() <= 0, f"{qtype.name} {m}x{n}x{k} {isa.name}: over the bound by {excess.max():.3g}"
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", BLOCK_32, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3, 16, 64, 300])
@pytest.mark.parametrize(("n", "k"), [(576, 576), (192, 576), (1536, 576), (576, 1536)])
def test_32_weight_blocks_at_smollm2_shapes(isa, qtype, m, n, k):
    _check(qtype, m, n, k, isa)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3, 16, 64, 300])
def test_k_quants(isa, qtype, m):
    _check(qtype, m, 576, 1536, isa)  # SmolLM2's down projection: 1536 inputs, six 256-weight super-blocks


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m", [1, 3, 16, 64, 300])
@pytest.mark.parametrize(("n", "k"), [(384, 256), (1024, 384), (256, 1024)])
def test_q4_g128_groups(isa, m, n, k):
    _check(GGMLType.Q4_G128, m, n, k, isa)  # AWQ / GPTQ's groups of 128: 2, 3 and 8 groups per row


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", [GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.Q4_K], ids=lambda t: t.name)
def test_the_lm_head_shape(isa, qtype):
    k = 768 if qtype is GGMLType.Q4_K else 576  # SmolLM2's 49152 x 576 (a K-quant needs whole super-blocks)
    for m in (1, 3):
        _check(qtype, m, 49152, k, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_fp32_a_bias_odd_sizes_and_strided_rows(isa):
    _check(GGMLType.Q4_0, 5, 37, 96, isa, torch.float32, bias=True)  # a last tile of 5 rows, 3 blocks (pad to 128)
    _check(GGMLType.Q6_K, 2, 9, 256, isa, torch.float32, bias=True)
    _check(GGMLType.Q4_1, 40, 100, 64, isa, torch.bfloat16, bias=True)  # prefill sizes: bf16-widened on AVX-512
    raw = random_rows(GGMLType.Q8_0, 24, 64)
    x = torch.randn(6, 128)[:, :64]  # rows 128 apart
    assert torch.equal(bq_linear(x, raw, GGMLType.Q8_0, None, isa),
                       bq_linear(x.contiguous(), raw, GGMLType.Q8_0, None, isa))
    assert bq_linear(x.view(2, 3, 64), raw, GGMLType.Q8_0, None, isa).shape == (2, 3, 24)
    assert bq_linear(x[:0], raw, GGMLType.Q8_0, None, isa).shape == (0, 24)
    zero = bq_linear(torch.zeros(1, 64), raw, GGMLType.Q8_0, None, isa)  # max|x| = 0: codes 0, not 0 / 0
    assert not zero.any()


@needs_kernels
@pytest.mark.parametrize("qtype", KERNEL_TYPES, ids=lambda t: t.name)
def test_embedding_rows_are_bit_identical_to_the_reference(qtype):
    raw = random_rows(qtype, 50, 512)
    table = dequantize(raw, qtype, 512)
    ids = torch.tensor([[0, 49, 7], [7, 7, 1]])
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(bq_embedding(ids, raw, qtype, 512, dtype), table[ids].to(dtype))
    with pytest.raises(IndexError, match="out of range"):
        bq_embedding(torch.tensor([50]), raw, qtype, 512, torch.float32)


@needs_kernels
def test_sprig_cpu_isa_caps_the_path_and_none_turns_it_off(monkeypatch):
    raw = random_rows(GGMLType.Q4_0, 8, 64)
    monkeypatch.setenv("SPRIG_CPU_ISA", "portable")
    assert int8_isa() is Int8Isa.PORTABLE and bq_supports(GGMLType.Q4_0, 64, torch.bfloat16, raw)
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    assert not bq_supports(GGMLType.Q4_0, 64, torch.bfloat16, raw)
    monkeypatch.delenv("SPRIG_CPU_ISA")
    assert not bq_supports(GGMLType.Q4_0, 64, torch.float16, raw)  # fp16 activations: the torch path
    assert not bq_supports(GGMLType.BF16, 64, torch.bfloat16, raw)  # float formats are not block formats


@needs_kernels
def test_the_portable_build_computes_within_the_bound():
    """The library built for the compiler's default target (another vendor's CPU, Arm) runs the portable path."""
    from sprig.kernels import cpu_native

    lib = cpu_native.load_library(tuple(f for f in cpu_native.FLAGS if f != "-march=native"))
    assert lib.bq_best_isa() == Int8Isa.PORTABLE
    raw = random_rows(GGMLType.Q4_K, 16, 256)
    w = dequantize(raw, GGMLType.Q4_K, 256)
    x = torch.randn(3, 256)
    out = torch.empty(3, 16)
    args = (x.data_ptr(), 256, raw.data_ptr(), raw.shape[1], int(GGMLType.Q4_K), None, out.data_ptr(), 3, 16, 256, 0,
            0)
    assert lib.bq_linear(*args, 0, 1) == 0
    ref = x @ w.T
    assert ((out - ref).abs() <= _bound(x, w, ref, False)).all()
    assert lib.bq_linear(*args, int(Int8Isa.AVX2), 1) != 0  # a path the build lacks is refused, not run


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m", [1, 5, 16])  # AVX512_VNNI: direct, direct, bf16-widened; the other paths: tiled
def test_fp32_output_of_bf16_activations_is_the_unrounded_sum(isa, m):
    """The LM head's fp32 logits: the same sums the bf16 output rounds, within the fp32 bound."""
    out32 = _check(GGMLType.Q4_1, m, 70, 128, isa, torch.bfloat16, bias=True, out_dtype=torch.float32)
    out16 = _check(GGMLType.Q4_1, m, 70, 128, isa, torch.bfloat16, bias=True)
    assert torch.equal(out32.to(torch.bfloat16), out16)
    assert not torch.equal(out32, out16.float())  # the fp32 logits keep bits the bf16 ones round away
