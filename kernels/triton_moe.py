"""Mixture-of-experts feed-forward (Triton twin of `kernels/moe.py`'s `fused_moe`).

Routing stays in torch (softmax, top-k: one small [T, E] op per layer). The T * k routing slots are sorted by
expert and each expert's run padded to whole `BLOCK_M` tiles, so every tile of the grouped GEMM belongs to one
expert: a program multiplies its tile's rows (gathered by slot) by its expert's weight, gate_up first, then down
with each slot's routing weight applied in fp32. The slots' outputs are summed per token in fp32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sprig.kernels.moe import route
from sprig.kernels.triton_activation import silu_and_mul
from sprig.kernels.triton_utils import dot_precision

BLOCK_M = 16  # slots per tile (tl.dot's minimum); an expert's run is padded to a multiple of it
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def _expert_gemm_kernel(a_ptr, w_ptr, out_ptr, slots_ptr, tile_expert_ptr, slot_weight_ptr, num_slots, N, K,
                        a_stride, w_expert_stride, out_stride, ROW_DIV: tl.constexpr, APPLY_WEIGHT: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        DOT_PRECISION: tl.constexpr):
    """out[slot] = a[slot // ROW_DIV] . W_e^T (x the slot's routing weight) for the tile's slots, e its expert."""
    tile = tl.program_id(0)
    slots = tl.load(slots_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slots < num_slots  # padding slots are num_slots
    expert = tl.load(tile_expert_ptr + tile).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    a_rows = a_ptr + (slots // ROW_DIV).to(tl.int64)[:, None] * a_stride
    w_cols = w_ptr + expert * w_expert_stride + cols.to(tl.int64)[None, :] * K
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(a_rows + ks[None, :], mask=valid[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_N]
        acc = tl.dot(a, w, acc, input_precision=DOT_PRECISION)
    if APPLY_WEIGHT:
        # Rounded to the weights' dtype first, as the reference's down product is, then scaled in fp32.
        acc = acc.to(w_ptr.dtype.element_ty).to(tl.float32)
        acc = acc * tl.load(slot_weight_ptr + slots, mask=valid, other=0.0)[:, None]
    out = out_ptr + slots.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


def align_slots(ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots [tiles * BLOCK_M]: the routing slots sorted by expert, each expert's run padded with `ids.numel()`
    to whole tiles; tile_expert [tiles]: each tile's expert)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    padded_start = torch.cumsum(tiles, 0) * BLOCK_M - tiles * BLOCK_M
    start = torch.cumsum(counts, 0) - counts
    sorted_experts = flat[order]
    rank = torch.arange(flat.numel(), device=ids.device) - start[sorted_experts]
    slots = torch.full((int(tiles.sum()) * BLOCK_M,), flat.numel(), dtype=torch.int64, device=ids.device)
    slots[padded_start[sorted_experts] + rank] = order
    tile_expert = torch.repeat_interleave(torch.arange(num_experts, device=ids.device), tiles)
    return slots, tile_expert


def _expert_gemm(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, slots: torch.Tensor, tile_expert: torch.Tensor,
                 weights: torch.Tensor, row_div: int, apply_weight: bool) -> None:
    n, k = w.shape[1], w.shape[2]
    grid = (tile_expert.numel(), triton.cdiv(n, BLOCK_N))
    _expert_gemm_kernel[grid](a, w, out, slots, tile_expert, weights, weights.numel(), n, k, a.stride(0),
                              w.stride(0), out.stride(0), ROW_DIV=row_div, APPLY_WEIGHT=apply_weight,
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                              DOT_PRECISION=dot_precision(a.dtype))


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, router_logits: torch.Tensor, top_k: int,
              renormalize: bool) -> torch.Tensor:
    """`kernels.moe.fused_moe`: x [T, H], w13 [E, 2I, H], w2 [E, H, I], router logits [T, E] → [T, H]."""
    t, h = x.shape
    if t == 0:
        return torch.empty_like(x)
    weights, ids = route(router_logits, top_k, renormalize)
    slots, tile_expert = align_slots(ids, w13.shape[0])
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    gate_up = torch.empty(t * top_k, w13.shape[1], dtype=x.dtype, device=x.device)
    _expert_gemm(x, w13, gate_up, slots, tile_expert, weights.reshape(-1), top_k, False)
    down = torch.empty(t * top_k, h, dtype=torch.float32, device=x.device)
    _expert_gemm(silu_and_mul(gate_up), w2, down, slots, tile_expert, weights.reshape(-1).contiguous(), 1, True)
    return down.view(t, top_k, h).sum(1).to(x.dtype)
