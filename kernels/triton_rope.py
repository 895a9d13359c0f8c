"""Rotary position embedding in the rotate-half layout, in place (Triton twin of `kernels/rope.py`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(x_ptr, row_stride, head_stride, n_heads, tok, cos, sin, half, BLOCK_H: tl.constexpr,
                  BLOCK_HALF: tl.constexpr):  # fmt: skip
    """Rotate every head of one token: (x1, x2) → (x1 cos - x2 sin, x2 cos + x1 sin) in float32."""
    heads = tl.arange(0, BLOCK_H)[:, None]
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    valid = (heads < n_heads) & (cols < half)
    p1 = x_ptr + tok * row_stride + heads * head_stride + cols
    x1 = tl.load(p1, mask=valid, other=0.0)
    x2 = tl.load(p1 + half, mask=valid, other=0.0)
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    tl.store(p1, (a * cos - b * sin).to(x1.dtype), mask=valid)
    tl.store(p1 + half, (b * cos + a * sin).to(x1.dtype), mask=valid)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, pos_ptr, cs_ptr,
    q_row_stride, q_head_stride, k_row_stride, k_head_stride, cs_stride,
    n_q_heads, n_k_heads, half,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    cols = tl.arange(0, BLOCK_HALF)
    cos = tl.load(cs_ptr + pos * cs_stride + cols, mask=cols < half, other=0.0)
    sin = tl.load(cs_ptr + pos * cs_stride + half + cols, mask=cols < half, other=0.0)
    # fp32 cos/sin, as the reference uses them: rotate in float32, one rounding at the store.
    cos = cos.to(tl.float32)[None, :]
    sin = sin.to(tl.float32)[None, :]
    _rotate_heads(q_ptr, q_row_stride, q_head_stride, n_q_heads, tok, cos, sin, half, BLOCK_HQ, BLOCK_HALF)
    _rotate_heads(k_ptr, k_row_stride, k_head_stride, n_k_heads, tok, cos, sin, half, BLOCK_HK, BLOCK_HALF)


def apply_rotary_(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place by their token positions [T].

    `cos_sin_cache` is float32 [max_positions, D]: cos of the D/2 frequencies, then sin. q and k may be strided
    views (e.g. slices of a fused qkv projection) as long as their last dim is contiguous.
    """
    assert q.stride(-1) == 1 and k.stride(-1) == 1, "apply_rotary_ needs a contiguous head dim"
    assert cos_sin_cache.stride(-1) == 1
    n_tokens, n_q_heads, head_dim = q.shape
    if n_tokens == 0:
        return
    half = head_dim // 2
    _rope_kernel[(n_tokens,)](
        q, k, positions, cos_sin_cache,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin_cache.stride(0),
        n_q_heads, k.shape[1], half,
        BLOCK_HQ=triton.next_power_of_2(n_q_heads),
        BLOCK_HK=triton.next_power_of_2(k.shape[1]), BLOCK_HALF=triton.next_power_of_2(half),
        num_warps=4,
    )  # fmt: skip
