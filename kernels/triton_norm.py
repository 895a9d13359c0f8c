"""RMSNorm, alone and fused with the residual add (Triton twins of `kernels/norm.py`).

One program normalizes one row. The order of operations matches the torch reference: normalize and scale by the
weight in float32, then round once to the promoted dtype of (weight, input).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sprig.kernels.norm import residual_dtype
from sprig.kernels.triton_utils import TORCH_TO_TL, row_num_warps


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    new_res_ptr,
    n_cols,
    x_stride,
    res_stride,
    out_stride,
    new_res_stride,
    eps,
    FUSE_ADD: tl.constexpr,
    IN_DTYPE: tl.constexpr,
    OUT_DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: rows * stride can pass 2**31 on big batches
    cols = tl.arange(0, BLOCK)
    valid = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=valid, other=0.0)
    if FUSE_ADD:
        r = tl.load(res_ptr + row * res_stride + cols, mask=valid, other=0.0)
        x = x.to(IN_DTYPE) + r.to(IN_DTYPE)  # the residual stream's dtype (fp32 for bf16/fp16), like torch
        tl.store(new_res_ptr + row * new_res_stride + cols, x, mask=valid)
    x32 = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (x32 * inv_rms * w).to(OUT_DTYPE), mask=valid)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """[..., H] → [M, H] with a unit stride on the last dim (a view when possible)."""
    rows = t.reshape(-1, t.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the row kernel; returns (normed, new residual or None) shaped like x."""
    hidden = x.shape[-1]
    in_dtype = x.dtype if residual is None else residual_dtype(x.dtype)
    out_dtype = torch.result_type(weight, x)
    x2 = _as_rows(x)
    out = torch.empty(x2.shape, dtype=out_dtype, device=x.device)
    res2 = _as_rows(residual) if residual is not None else x2
    new_res = torch.empty(x2.shape, dtype=in_dtype, device=x.device) if residual is not None else out
    block = triton.next_power_of_2(hidden)
    if x2.shape[0] > 0:
        _rms_norm_kernel[(x2.shape[0],)](
            x2, res2, weight, out, new_res, hidden,
            x2.stride(0), res2.stride(0), out.stride(0), new_res.stride(0), eps,
            FUSE_ADD=residual is not None, IN_DTYPE=TORCH_TO_TL[in_dtype], OUT_DTYPE=TORCH_TO_TL[out_dtype],
            BLOCK=block, num_warps=row_num_warps(block),
        )  # fmt: skip
    shape = (*x.shape[:-1], hidden)
    return out.view(shape), (new_res.view(shape) if residual is not None else None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS-normalize the last dim of x and scale by `weight` in float32, rounding once to the output dtype."""
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (rms_norm(x + residual), x + residual in `residual_dtype`) in one pass over memory."""
    normed, new_residual = _launch(x, residual, weight, eps)
    assert new_residual is not None
    return normed, new_residual
