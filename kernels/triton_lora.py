"""The segmented LoRA product (Triton twin of `kernels/lora.py`'s `lora_add_`).

One program per (token, block of output columns): it reads its token's slot (-1: nothing to add), computes the
token's rank-r activation h = x A_s^T in fp32 (recomputed per column block: r is small), then adds h B_s^T to its
columns of y, rounded once into y's dtype. At decode sizes every token is its own segment, so this is BGMV; a
prefill run's programs read the same A and B, which stay in cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sprig.kernels.lora import LoraBatch

BLOCK_N = 64
BLOCK_K = 64


@triton.jit
def _lora_kernel(x_ptr, y_ptr, a_ptr, b_ptr, ranks_ptr, slots_ptr, K, N, R, x_stride, y_stride,
                 BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slots_ptr + t)
    if slot >= 0:
        s = slot.to(tl.int64)
        rank = tl.load(ranks_ptr + s)
        rs = tl.arange(0, BLOCK_R)
        r_ok = rs < rank
        h = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            x = tl.load(x_ptr + t.to(tl.int64) * x_stride + ks, mask=k_ok, other=0.0).to(tl.float32)
            a = tl.load(a_ptr + s * K * R + ks[:, None] * R + rs[None, :], mask=k_ok[:, None] & r_ok[None, :],
                        other=0.0)
            h += tl.sum(x[:, None] * a, axis=0)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cols < N
        b = tl.load(b_ptr + s * R * N + rs[:, None] * N + cols[None, :], mask=r_ok[:, None] & c_ok[None, :],
                    other=0.0)
        y_row = y_ptr + t.to(tl.int64) * y_stride + cols
        y = tl.load(y_row, mask=c_ok, other=0.0).to(tl.float32)
        tl.store(y_row, (y + tl.sum(h[:, None] * b, axis=0)).to(y_ptr.dtype.element_ty), mask=c_ok)


def lora_add_(y: torch.Tensor, x: torch.Tensor, a_t: torch.Tensor, b_t: torch.Tensor, ranks: torch.Tensor,
              batch: LoraBatch) -> None:
    """`kernels.lora.lora_add_`: y [T, N] (unit column stride, may be a column slice) += each token's LoRA delta."""
    t, n = y.shape
    if t == 0:
        return  # why not on batch.empty: a graph captured before any adapter ran must still launch the kernel
    k, r = a_t.shape[1], a_t.shape[2]
    grid = (t, triton.cdiv(n, BLOCK_N))
    _lora_kernel[grid](x, y, a_t, b_t, ranks, batch.token_slots, k, n, r, x.stride(0), y.stride(0),
                       BLOCK_R=max(16, triton.next_power_of_2(r)), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
