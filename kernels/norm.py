"""RMSNorm, alone and fused with the residual add (torch reference)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS-normalize the last dim and scale by `weight` in float32, rounding once to the output dtype.

    transformers rounds the normalized row to x's dtype before the scale (two bf16 roundings); one rounding keeps
    bf16 closer to fp32, and fp32 is unchanged. The output dtype is the promotion of (weight, x)."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * weight.float()).to(torch.result_type(weight, x))


def residual_dtype(dtype: torch.dtype) -> torch.dtype:
    """The residual stream's dtype for activations of `dtype`: at least float32 (bf16/fp16 sums lose the small
    updates of later layers; fp32 halves SmolLM2-135M's bf16 logit error against fp32)."""
    return torch.promote_types(dtype, torch.float32)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (rms_norm(x + residual), x + residual): the pre-norm decoder's add-then-normalize step.

    The sum is in `residual_dtype` (float32 for bf16/fp16 x; `residual` may be x's dtype or that one); the
    normalized row is in x's dtype (promoted with the weight's)."""
    summed = x.to(residual_dtype(x.dtype)) + residual
    return rms_norm(summed, weight, eps).to(torch.result_type(weight, x)), summed


def rms_norm_fp32_scale(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    """RMS-normalize and scale by `weight` both in float32, then cast to `out_dtype` (Gemma's and OLMo-2's order)."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * weight.float()).to(out_dtype)
