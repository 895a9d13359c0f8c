"""Small helpers shared by the Triton kernels: dtype mapping and launch sizing."""

from __future__ import annotations

import torch
import triton.language as tl

# torch dtype → Triton dtype, for kernels that cast explicitly (constexpr arguments).
TORCH_TO_TL: dict[torch.dtype, tl.dtype] = {
    torch.float32: tl.float32,
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
}


def row_num_warps(block: int) -> int:
    """Warps for a program that reduces one row of `block` elements: ~256 elements per warp, 1 to 8 warps."""
    return max(1, min(8, block // 256))


def dot_precision(dtype: torch.dtype) -> str:
    """`tl.dot` input precision: exact float32 ("ieee") for fp32 inputs, so fp32 runs match torch closely."""
    return "ieee" if dtype == torch.float32 else "tf32"
