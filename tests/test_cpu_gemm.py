"""bf16 linears through sprig's C kernels equal an fp32 product rounded once to bf16: AMX tiles
(kernels/csrc/amx_gemm.c) where the CPU has them, and the vector kernel (kernels/csrc/vec_gemm.c) in every code path
this machine can run (AVX512_BF16, AVX-512F, AVX2 + FMA, portable C)."""

from __future__ import annotations

import pytest
import torch
from kernel_paths import needs_kernels, path_params

from sprig.kernels.cpu_gemm import (
    OUT_CODES,
    VecIsa,
    amx_linear,
    amx_supports,
    vec_isa,
    vec_linear,
    vec_supports,
    vnni_pack,
)
from sprig.kernels.cpu_native import amx_available, native_kernels
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.linear import LinearKernel
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

needs_amx = pytest.mark.skipif(not amx_available(), reason="this CPU (or kernel) offers no AMX bf16 tiles")
BEST = VecIsa(native_kernels().vec_gemm_best_isa()) if native_kernels() is not None else None
ISAS = path_params(VecIsa, BEST)


def _case(m: int, k: int, n: int, bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16()
    w = (torch.randn(n, k, generator=g) * k**-0.5).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    return x, w, b, ref


def _logits(path, ids: list[int]) -> torch.Tensor:
    model = load_model(path, "bfloat16")
    pool = KVPool(model.cfg, PoolSize(8, 16), model.dtype)
    return ModelRunner(model, pool).forward([SeqInput(ids, 0, pool.alloc(4), all_logits=True)]).logits.float()


def _close(out: torch.Tensor, ref: torch.Tensor) -> bool:
    # fp32 accumulation in another order than `ref`, then one rounding to bf16 (relative step 2^-8).
    return torch.allclose(out.float(), ref, rtol=2**-8, atol=1e-3)


def test_vnni_pack_puts_each_input_pair_of_16_columns_on_one_line():
    w = torch.arange(32 * 6, dtype=torch.float32).view(32, 6).bfloat16()
    packed = vnni_pack(w)
    assert packed.shape == (2, 3, 16, 2)
    assert torch.equal(packed[1, 2, 5], w[16 + 5, 4:6])  # panel 1, pair 2, column 5: w[21][4], w[21][5]


@needs_amx
@pytest.mark.parametrize("m", [1, 15, 16, 17, 31, 32, 33, 127, 128, 129, 300, 640])
@pytest.mark.parametrize(("k", "n"), [(64, 32), (768, 2304), (2048, 768), (96, 160)])
@pytest.mark.parametrize("bias", [False, True])
def test_amx_matches_the_fp32_product_to_bf16_rounding(m, k, n, bias):
    """Rows in whole 32-row blocks, a zero-padded tail block, one 128-row work item or several; with a bias."""
    x, w, b, ref = _case(m, k, n, bias)
    out = amx_linear(x, vnni_pack(w), b)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert _close(out, ref)


@needs_amx
def test_amx_leading_dims_and_strided_inputs():
    x, w, _, ref = _case(24, 128, 64, False)
    packed = vnni_pack(w)
    assert _close(amx_linear(x.view(2, 12, 128), packed, None).view(24, 64), ref)
    wide = torch.cat([x, x], dim=1)[:, :128]  # rows with a stride of 256
    assert torch.equal(amx_linear(wide, packed, None), amx_linear(x, packed, None))
    assert amx_linear(x[:0], packed, None).shape == (0, 64)


@needs_amx
def test_amx_supported_shapes_and_dtypes():
    assert amx_supports(torch.zeros(64, 96, dtype=torch.bfloat16))
    assert not amx_supports(torch.zeros(48, 96, dtype=torch.bfloat16))  # 48 output columns: not whole panels
    assert not amx_supports(torch.zeros(64, 80, dtype=torch.bfloat16))  # 80 inputs: not whole tiles
    assert not amx_supports(torch.zeros(64, 96, dtype=torch.float16))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 13, 64])
@pytest.mark.parametrize(("k", "n"), [(64, 16), (768, 1280), (2048, 48), (6, 80), (96, 40), (64, 2100)])
@pytest.mark.parametrize("bias", [False, True])
def test_vec_matches_the_fp32_product_to_bf16_rounding(isa, m, k, n, bias):
    """Every row count of a pass (1-6) and several passes; groups of 4 panels and a last group of 1-3; a last
    panel of fewer than 16 columns (40, and a 2,100-row vocabulary); a bias."""
    x, w, b, ref = _case(m, k, n, bias)
    out = vec_linear(x, vnni_pack(w), b, isa, n)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert _close(out, ref)


@pytest.mark.parametrize("isa", ISAS)
def test_vec_leading_dims_strided_inputs_and_no_rows(isa):
    x, w, _, ref = _case(24, 128, 64, False)
    packed = vnni_pack(w)
    assert _close(vec_linear(x.view(2, 12, 128), packed, None, isa).view(24, 64), ref)
    wide = torch.cat([x, x], dim=1)[:, :128]  # rows with a stride of 256
    assert torch.equal(vec_linear(wide, packed, None, isa), vec_linear(x, packed, None, isa))
    assert vec_linear(x[:0], packed, None, isa).shape == (0, 64)


@needs_kernels
def test_sprig_cpu_isa_caps_the_vector_path(monkeypatch):
    monkeypatch.setenv("SPRIG_CPU_ISA", "portable")
    assert vec_isa() is VecIsa.PORTABLE
    monkeypatch.setenv("SPRIG_CPU_ISA", "AVX512_BF16")  # a cap above this machine's best is the best
    assert vec_isa() is BEST
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    assert vec_isa() is None and not vec_supports(torch.zeros(64, 96, dtype=torch.bfloat16))
    monkeypatch.setenv("SPRIG_CPU_ISA", "sse9")
    with pytest.raises(ValueError, match="SPRIG_CPU_ISA='sse9' is not one of portable, avx2"):
        vec_isa()


@needs_kernels
def test_vec_supported_shapes_and_dtypes():
    assert vec_supports(torch.zeros(48, 96, dtype=torch.bfloat16))
    assert vec_supports(torch.zeros(40, 96, dtype=torch.bfloat16))  # a last panel of 8 columns, zero-padded
    assert not vec_supports(torch.zeros(48, 95, dtype=torch.bfloat16))  # an odd number of inputs
    assert not vec_supports(torch.zeros(48, 96, dtype=torch.float16))


@needs_kernels
def test_bf16_models_pick_amx_then_the_vector_kernel_then_onednn(tiny_paths, monkeypatch):
    for name in ("SPRIG_CPU_ISA", "SPRIG_AMX"):
        monkeypatch.delenv(name, raising=False)  # CI's fallback run caps them
    path = tiny_paths["tiny-llama"]
    model = load_model(path, "bfloat16")
    proj = model.layers[0].mlp.down_proj
    assert proj.kernel is (LinearKernel.AMX if amx_available() else LinearKernel.VEC)
    assert proj.vnni is not None and proj.packed is None and proj.weight.is_meta
    assert model.linear_kernels.startswith("amx" if amx_available() else f"vec ({BEST.name.lower()})")
    monkeypatch.setenv("SPRIG_AMX", "0")
    monkeypatch.setenv("SPRIG_CPU_ISA", "avx2")
    proj = load_model(path, "bfloat16").layers[0].mlp.down_proj
    assert proj.kernel is LinearKernel.VEC and proj.isa is min(VecIsa.AVX2, BEST)
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    proj = load_model(path, "bfloat16").layers[0].mlp.down_proj
    assert proj.vnni is None and proj.kernel in (LinearKernel.ONEDNN, LinearKernel.TORCH)
    assert load_model(path, "float16").layers[0].mlp.down_proj.vnni is None


@needs_kernels
@pytest.mark.parametrize("isa", ["avx512_bf16", "avx2", "portable"])
def test_vector_linears_give_the_onednn_logits_to_rounding(tiny_paths, monkeypatch, isa):
    """A whole bf16 model on each vector path against F.linear / oneDNN: only summation order differs, so logits
    agree to a few bf16 steps (bf16 keeps 8 bits; 3 layers of rounded activations)."""
    path = tiny_paths["tiny-llama"]
    ids = list(range(3, 40))
    monkeypatch.setenv("SPRIG_AMX", "0")
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    ref = _logits(path, ids)
    monkeypatch.setenv("SPRIG_CPU_ISA", isa)
    out = _logits(path, ids)
    assert ((out - ref).abs().max() / ref.abs().max()).item() < 0.03
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean().item() >= 0.9


@needs_kernels
def test_the_portable_build_computes_the_same_product():
    """The library built for the compiler's default target (what a CPU of another vendor or Arm gets) has only the
    portable path here, and it gives the product."""
    from sprig.kernels import cpu_native

    lib = cpu_native.load_library(tuple(f for f in cpu_native.FLAGS if f != "-march=native") + ("-mno-avx512f",))
    assert lib.vec_gemm_best_isa() < VecIsa.AVX512
    x, w, b, ref = _case(5, 96, 80, True)
    out = torch.empty(5, 80, dtype=torch.bfloat16)
    packed = vnni_pack(w)
    bf16, fp32 = OUT_CODES[torch.bfloat16], OUT_CODES[torch.float32]
    assert lib.vec_linear_bf16(x.data_ptr(), packed.data_ptr(), b.data_ptr(), out.data_ptr(), 5, 80, 96,
                               lib.vec_gemm_best_isa(), bf16, 2) == 0
    assert _close(out, ref)
    wide = torch.empty(5, 80)
    assert lib.vec_linear_bf16(x.data_ptr(), packed.data_ptr(), b.data_ptr(), wide.data_ptr(), 5, 80, 96,
                               lib.vec_gemm_best_isa(), fp32, 2) == 0
    assert torch.allclose(wide, ref, rtol=1e-5, atol=1e-5)
    assert lib.vec_linear_bf16(x.data_ptr(), packed.data_ptr(), 0, out.data_ptr(), 5, 80, 96, VecIsa.AVX512_BF16,
                               bf16, 2) != 0  # a path the build lacks is refused, not run
