"""The segmented LoRA product (Triton twin of `kernels/lora.py`'s `lora_add_`).

One program per (token, target module, block of the module's output columns): it reads its token's slot (-1:
nothing to add) and its module's place (`LoraWeights.table`), computes the token's rank-r activation for that
module h = x A_{s,p}^T in fp32 (recomputed per column block: r is small), then adds h B_{s,p}^T to its columns of
y, rounded once into y's dtype. At decode sizes every token is its own segment, so this is BGMV; a prefill run's
programs read the same A and B, which stay in cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sprig.kernels.lora import LoraBatch, LoraWeights

BLOCK_N = 64
BLOCK_K = 64


@triton.jit
def _lora_kernel(x_ptr, y_ptr, a_ptr, b_ptr, ranks_ptr, slots_ptr, parts_ptr, K, R, PR, NB, x_stride, y_stride,
                 BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0)
    p = tl.program_id(1)
    slot = tl.load(slots_ptr + t)
    ycol = tl.load(parts_ptr + 3 * p)
    width = tl.load(parts_ptr + 3 * p + 1)
    bcol = tl.load(parts_ptr + 3 * p + 2)
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    if (slot >= 0) & (tl.program_id(2) * BLOCK_N < width):
        s = slot.to(tl.int64)
        rank = tl.load(ranks_ptr + s)
        rs = tl.arange(0, BLOCK_R)
        r_ok = rs < rank
        h = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            x = tl.load(x_ptr + t.to(tl.int64) * x_stride + ks, mask=k_ok, other=0.0).to(tl.float32)
            a = tl.load(a_ptr + s * K * PR + ks[:, None] * PR + p * R + rs[None, :],
                        mask=k_ok[:, None] & r_ok[None, :], other=0.0).to(tl.float32)
            h += tl.sum(x[:, None] * a, axis=0)
        c_ok = cols < width
        b = tl.load(b_ptr + s * R * NB + rs[:, None] * NB + bcol + cols[None, :], mask=r_ok[:, None] & c_ok[None, :],
                    other=0.0).to(tl.float32)
        y_row = y_ptr + t.to(tl.int64) * y_stride + ycol + cols
        y = tl.load(y_row, mask=c_ok, other=0.0).to(tl.float32)
        tl.store(y_row, (y + tl.sum(h[:, None] * b, axis=0)).to(y_ptr.dtype.element_ty), mask=c_ok)


def lora_add_(y: torch.Tensor, x: torch.Tensor, w: LoraWeights, batch: LoraBatch) -> None:
    """`kernels.lora.lora_add_`: y [T, N] (unit column stride, the linear's fused output) += each token's LoRA
    delta for every module of `w`."""
    t = y.shape[0]
    if t == 0:
        return  # why not on batch.empty: a graph captured before any adapter ran must still launch the kernel
    k, r, nb = w.a_t.shape[1], w.rank, w.b_t.shape[2]
    grid = (t, len(w.parts), triton.cdiv(max(width for _, width, _ in w.parts), BLOCK_N))
    _lora_kernel[grid](x, y, w.a_t, w.b_t, w.ranks, batch.token_slots, w.table, k, r, w.a_t.shape[2], nb,
                       x.stride(0), y.stride(0), BLOCK_R=max(16, triton.next_power_of_2(r)), BLOCK_N=BLOCK_N,
                       BLOCK_K=BLOCK_K)
