"""The fused C elementwise ops of the "cpu" backend (kernels/csrc/cpu_elementwise.c) against their torch references.

RMSNorm (alone and with the residual add), rotary embedding and the KV store are bitwise equal to the references on
fp32, bf16 and fp16: the C kernels round where torch rounds and add the sum of squares in torch's order. SiLU's
exponential is not torch's, so silu_and_mul is held to a few fp32 ulps (and in practice is bitwise on bf16/fp16).
Each case runs on the AVX-512 build and on the portable build (`-mno-avx512f`).
"""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import activation, cpu_native, norm, rope
from sprig.kernels import attention as ref_attention
from sprig.kernels import cpu_elementwise as ew
from sprig.kernels.backend import get_kernels

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def libs():
    """Both builds of the kernel library: the one the backend uses, and the portable C path."""
    generic = tuple(f for f in cpu_native.FLAGS if f != "-march=native") + ("-mno-avx512f",)
    return {"avx512": cpu_native.load_library(), "generic": cpu_native.load_library(generic)}


@pytest.fixture(params=["avx512", "generic"])
def lib(request, libs, monkeypatch):
    """Route the wrappers to one build for the test."""
    chosen = libs[request.param]
    monkeypatch.setattr(ew, "native_kernels", lambda: chosen)
    return chosen


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance between a and b in units in the last place of their dtype."""
    int_dtype, magnitude = (torch.int32, 0x7FFFFFFF) if a.dtype == torch.float32 else (torch.int16, 0x7FFF)

    def ordered(x: torch.Tensor) -> torch.Tensor:  # float bits as integers that count ulps across zero
        i = x.contiguous().view(int_dtype).to(torch.int64)
        return torch.where(i < 0, -(i & magnitude), i)

    return int((ordered(a) - ordered(b)).abs().max()) if a.numel() else 0


def _cos_sin_cache(positions: int, d: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


def _qkv_views(t: int, hq: int, hkv: int, d: int, dtype: torch.dtype, seed: int):
    """q, k, v as the model makes them: strided [T, H, D] views of one fused projection output."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(t, (hq + 2 * hkv) * d, generator=g).to(dtype)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    return qkv, q.reshape(t, hq, d), k.reshape(t, hkv, d), v.reshape(t, hkv, d)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t", [1, 7, 513])
@pytest.mark.parametrize("hidden", [64, 768, 896, 1003])
def test_rms_norm_is_bitwise_the_reference(lib, dtype, t, hidden):
    g = torch.Generator().manual_seed(t * hidden)
    x = (torch.randn(t, hidden, generator=g) * 3).to(dtype)
    w = (torch.rand(hidden, generator=g) + 0.5).to(dtype)
    out = ew.rms_norm(x, w, 1e-6)
    assert out.dtype == dtype and out.is_contiguous()
    assert torch.equal(out, norm.rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t", [1, 7, 513])
@pytest.mark.parametrize("hidden", [64, 768, 896])
@pytest.mark.parametrize("fp32_residual", [False, True])
def test_fused_add_rms_norm_is_bitwise_and_leaves_its_inputs_alone(lib, dtype, t, hidden, fp32_residual):
    """The residual stream is fp32 (the first layer adds to the embedding, in the activation dtype)."""
    g = torch.Generator().manual_seed(t + hidden)
    x, residual = (torch.randn(2, t, hidden, generator=g) * 2).to(dtype).unbind(0)
    residual = residual.float() * 1.001 if fp32_residual else residual  # * 1.001: bits bf16/fp16 cannot hold
    w = (torch.rand(hidden, generator=g) + 0.5).to(dtype)
    x_before, residual_before = x.clone(), residual.clone()
    out, summed = ew.fused_add_rms_norm(x, residual, w, 1e-5)
    ref_out, ref_summed = norm.fused_add_rms_norm(x, residual, w, 1e-5)
    assert out.dtype == dtype and summed.dtype == torch.float32
    assert torch.equal(summed, ref_summed) and torch.equal(out, ref_out)
    # The first layer's residual is the embedding output and the reference returns fresh tensors: so do we.
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_of_strided_heads(lib, dtype):
    """The q/k norm of Qwen3 normalizes each head of a strided view into the qkv output."""
    _, q, k, _ = _qkv_views(9, 8, 2, 128, dtype, seed=3)
    w = (torch.rand(128) + 0.5).to(dtype)
    assert not q.is_contiguous()
    assert torch.equal(ew.rms_norm(q, w, 1e-6), norm.rms_norm(q, w, 1e-6))
    assert torch.equal(ew.rms_norm(k, w, 1e-6), norm.rms_norm(k, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t", [1, 7, 513])
@pytest.mark.parametrize(("hq", "hkv", "d"), [(4, 4, 64), (8, 2, 128), (6, 2, 80), (14, 2, 64)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_apply_rotary_is_bitwise_the_reference(lib, dtype, t, hq, hkv, d, contiguous):
    qkv, q, k, v = _qkv_views(t, hq, hkv, d, dtype, seed=t * d + hq)
    if contiguous:
        q, k = q.contiguous(), k.contiguous()
    v_before = v.clone()
    q_ref, k_ref = q.clone(), k.clone()
    cache = _cos_sin_cache(4096, d)
    positions = torch.randint(0, 4096, (t,), generator=torch.Generator().manual_seed(t))
    ew.apply_rotary_(q, k, positions, cache)
    rope.apply_rotary_(q_ref, k_ref, positions, cache)
    assert torch.equal(q, q_ref) and torch.equal(k, k_ref)
    assert torch.equal(v, v_before)  # in place on the views: v, beside them in qkv, is not touched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("t", "inter"), [(1, 64), (7, 896), (513, 768), (3, 1100)])
def test_silu_and_mul_matches_the_reference(lib, dtype, t, inter):
    g = torch.Generator().manual_seed(t + inter)
    gate_up = torch.randn(t, 2 * inter, generator=g) * 6
    edges = [-200.0, -100.0, -89.0, -88.0, -80.0, 0.0, 80.0, 88.0, 89.0, 100.0]  # where exp over/underflows
    gate_up[0, :10] = torch.tensor(edges)
    gate_up = gate_up.to(dtype)
    out = ew.silu_and_mul(gate_up)
    expected = activation.silu_and_mul(gate_up)
    assert out.shape == expected.shape and out.dtype == dtype
    # The exponential differs from torch's by an ulp or two: a few fp32 ulps in the product, and a bf16/fp16
    # result differs only when that lands on a rounding boundary.
    assert _ulps(out, expected) <= (4 if dtype == torch.float32 else 1)


def test_silu_and_mul_of_a_3d_input(lib):
    gate_up = torch.randn(2, 5, 2 * 96).to(torch.bfloat16)
    assert torch.equal(ew.silu_and_mul(gate_up), activation.silu_and_mul(gate_up))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("t", "hkv", "d"), [(1, 4, 64), (7, 2, 128), (513, 2, 80)])
def test_store_kv_writes_what_index_copy_writes(lib, dtype, t, hkv, d):
    _, _, k, v = _qkv_views(t, 4, hkv, d, dtype, seed=t)
    slots = torch.randperm(1024, generator=torch.Generator().manual_seed(t))[:t]
    k_cache, v_cache = torch.zeros(2, 1024, hkv, d, dtype=dtype).unbind(0)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    ew.store_kv(k_cache, v_cache, slots, k, v)
    ref_attention.store_kv(k_ref, v_ref, slots, k, v)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


@pytest.mark.skipif(cpu_native.native_kernels() is None, reason="sprig's C kernels are off (SPRIG_NATIVE_KERNELS=0)")
def test_the_cpu_backend_uses_the_c_ops():
    ops = get_kernels("cpu")
    assert (ops.rms_norm, ops.fused_add_rms_norm, ops.apply_rotary_, ops.silu_and_mul, ops.store_kv) == (
        ew.rms_norm, ew.fused_add_rms_norm, ew.apply_rotary_, ew.silu_and_mul, ew.store_kv)
    assert get_kernels("torch").rms_norm is norm.rms_norm  # the reference stays the reference


def _all_ops(dtype: torch.dtype, device: str = "cpu") -> dict:
    """Run every wrapped op on small inputs; returns their results."""
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(2, 3, 32, generator=g).to(dtype).to(device).unbind(0)
    w = torch.rand(32, generator=g).to(dtype).to(device)
    _, q, k, v = _qkv_views(3, 2, 1, 32, torch.float32, seed=1)
    q, k, v = (t.to(dtype).to(device) for t in (q, k, v))
    k_cache, v_cache = torch.zeros(2, 8, 1, 32, dtype=dtype, device=device).unbind(0)
    positions = torch.tensor([0, 5, 9], device=device)
    ew.apply_rotary_(q, k, positions, _cos_sin_cache(16, 32).to(device))
    ew.store_kv(k_cache, v_cache, torch.tensor([1, 4, 6], device=device), k, v)
    return {"norm": ew.rms_norm(x, w, 1e-6), "fused": ew.fused_add_rms_norm(x, r, w, 1e-6),
            "silu": ew.silu_and_mul(torch.cat([x, r], -1)), "q": q, "k": k, "k_cache": k_cache, "v_cache": v_cache}


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a.dtype == b.dtype and torch.equal(a, b)


def test_without_the_library_every_op_is_the_torch_reference(monkeypatch):
    with_c = _all_ops(torch.bfloat16)
    monkeypatch.setattr(ew, "native_kernels", lambda: None)
    without = _all_ops(torch.bfloat16)
    assert all(_same(with_c[name], without[name]) for name in with_c)


def test_unsupported_inputs_fall_back_to_torch(monkeypatch):
    def refuse(*args):
        raise AssertionError("the C kernel was called")

    class NoKernels:  # a library whose every function fails the test: each call below must take the torch path
        def __getattr__(self, name):
            return refuse

    monkeypatch.setattr(ew, "native_kernels", lambda: NoKernels())
    _all_ops(torch.float64)  # no C dtype
    _all_ops(torch.float32, device="meta")  # not a CPU tensor
    x = torch.randn(3, 32).to(torch.bfloat16)
    w32 = torch.rand(32)  # an fp32 weight promotes the result to fp32, which the C kernel does not do
    assert _same(ew.rms_norm(x, w32, 1e-6), norm.rms_norm(x, w32, 1e-6))
    gate_up = torch.randn(32, 4).t()  # last dim strided
    assert _same(ew.silu_and_mul(gate_up), activation.silu_and_mul(gate_up))


def test_inputs_the_c_kernels_decline_reach_torch_and_its_errors(lib):
    """An out-of-range position or slot makes the C kernel decline untouched; torch then raises as it would."""
    _, q, k, v = _qkv_views(2, 2, 1, 32, torch.bfloat16, seed=0)
    q_before = q.clone()
    with pytest.raises(IndexError):
        ew.apply_rotary_(q, k, torch.tensor([0, 16]), _cos_sin_cache(16, 32))
    assert torch.equal(q, q_before)
    k_cache, v_cache = torch.zeros(2, 8, 1, 32, dtype=torch.bfloat16).unbind(0)
    slots = torch.tensor([1, 8])
    status = lib.store_kv(k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), k.data_ptr(), v.data_ptr(),
                          2, 1, 32, k.stride(0), k.stride(1), v.stride(0), v.stride(1), 8, 1, 1, 1, None, None)
    assert status != 0 and not k_cache.any() and not v_cache.any()
    with pytest.raises(IndexError):
        ew.store_kv(k_cache, v_cache, slots, k, v)
