"""Triton norm, RoPE, SwiGLU and bitmask kernels vs their torch references (interpreter on CPU)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the Triton kernels
pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
)

from sprig.kernels import activation, norm, rope, triton_activation, triton_bitmask, triton_norm, triton_rope  # noqa: E402  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
pytestmark = pytest.mark.timeout(60)


def _randn(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)


def _close(got, expected, dtype):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 200])
@pytest.mark.parametrize("weight_fp32", [False, True])
def test_rms_norm(dtype, hidden, weight_fp32):
    x = _randn(3, 5, hidden, dtype=dtype)
    w = _randn(hidden, dtype=torch.float32 if weight_fp32 else dtype, seed=1)
    _close(triton_norm.rms_norm(x, w, 1e-6), norm.rms_norm(x, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_strided_heads(dtype):
    """Per-head q/k norm on a view sliced out of a fused qkv projection."""
    qkv = _randn(4, 12, 64, dtype=dtype)
    q = qkv[:, :8]
    w = _randn(64, dtype=dtype, seed=1)
    _close(triton_norm.rms_norm(q, w, 1e-5), norm.rms_norm(q, w, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 200])
@pytest.mark.parametrize("fp32_residual", [False, True])
def test_fused_add_rms_norm(dtype, hidden, fp32_residual):
    """The residual stream is fp32 (the first layer adds to the embedding, in the activation dtype)."""
    x, r = _randn(7, hidden, dtype=dtype), _randn(7, hidden, dtype=dtype, seed=2)
    r = r.float() * 1.001 if fp32_residual else r  # * 1.001: bits bf16/fp16 cannot hold
    w = _randn(hidden, dtype=dtype, seed=1)
    got = triton_norm.fused_add_rms_norm(x, r, w, 1e-6)
    expected = norm.fused_add_rms_norm(x, r, w, 1e-6)
    _close(got[0], expected[0], dtype)
    assert got[1].dtype == torch.float32
    assert torch.equal(got[1], expected[1])  # the residual add is one fp32 rounding in both


def _cos_sin_cache(max_pos: int, head_dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.arange(max_pos).float()[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q_heads", "n_kv_heads", "head_dim"), [(4, 4, 64), (8, 2, 128), (8, 1, 64)])
def test_apply_rotary_in_place_on_strided_views(dtype, n_q_heads, n_kv_heads, head_dim):
    qkv = _randn(9, n_q_heads + 2 * n_kv_heads, head_dim, dtype=dtype)
    q, k = qkv[:, :n_q_heads], qkv[:, n_q_heads : n_q_heads + n_kv_heads]  # views: rotation must land in qkv
    q_ref, k_ref = q.clone(), k.clone()
    v_before = qkv[:, n_q_heads + n_kv_heads :].clone()
    positions = torch.tensor([0, 1, 2, 50, 7, 99, 3, 3, 64], device=DEVICE)
    cache = _cos_sin_cache(100, head_dim)
    rope.apply_rotary_(q_ref, k_ref, positions, cache)
    triton_rope.apply_rotary_(q, k, positions, cache)
    tol = 2 * TOL[dtype]  # the reference rounds each product to the dtype, the kernel only the result
    torch.testing.assert_close(q, q_ref, atol=tol, rtol=tol)
    torch.testing.assert_close(k, k_ref, atol=tol, rtol=tol)
    assert torch.equal(qkv[:, n_q_heads + n_kv_heads :], v_before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 2 * 300), (2, 3, 2 * 64), (0, 2 * 64)])
def test_silu_and_mul(dtype, shape):
    gate_up = _randn(*shape, dtype=dtype)
    _close(triton_activation.silu_and_mul(gate_up), activation.silu_and_mul(gate_up), dtype)


def _reference_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Logits with -inf where the token's bit is clear (independent of kernels/bitmask.py)."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).flatten(1)[:, : logits.shape[1]].bool()
    return logits.masked_fill(~bits, float("-inf"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [32, 100, 5000])
def test_apply_token_bitmask(dtype, vocab):
    logits = _randn(3, vocab, dtype=dtype)
    gen = torch.Generator().manual_seed(3)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (3, -(-vocab // 32)), dtype=torch.int32, generator=gen)
    bitmask[1] = 0  # nothing allowed
    bitmask[2, 0] = -1  # bit 31 set: the sign bit must count as a token
    bitmask = bitmask.to(DEVICE)
    expected = _reference_bitmask(logits, bitmask)
    triton_bitmask.apply_token_bitmask_(logits, bitmask)
    assert torch.equal(logits, expected)
    try:
        from sprig.kernels.bitmask import apply_token_bitmask_
    except ImportError:
        return
    again = _randn(3, vocab, dtype=dtype)
    apply_token_bitmask_(again, bitmask)
    assert torch.equal(again, expected)


def test_apply_token_bitmask_rejects_bad_shapes():
    with pytest.raises(ValueError, match="bitmask must be int32"):
        triton_bitmask.apply_token_bitmask_(torch.zeros(2, 64), torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="bitmask must be int32"):
        triton_bitmask.apply_token_bitmask_(torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.int64))
