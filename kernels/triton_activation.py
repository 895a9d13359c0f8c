"""Gated activations (Triton twin of `kernels/activation.py`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024  # columns per program: big enough to stream, small enough for any intermediate size


@triton.jit
def _silu_and_mul_kernel(gu_ptr, out_ptr, inter, gu_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = cols < inter
    gate = tl.load(gu_ptr + row * gu_stride + cols, mask=valid, other=0.0)
    up = tl.load(gu_ptr + row * gu_stride + inter + cols, mask=valid, other=0.0)
    g32 = gate.to(tl.float32)
    # silu rounds to the input dtype before the product, as torch's two separate ops do.
    act = (g32 / (1.0 + tl.exp(-g32))).to(gate.dtype)
    tl.store(out_ptr + row * out_stride + cols, act * up, mask=valid)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU: silu(gate) * up for gate_up = [..., 2 * I] holding gate then up; returns [..., I]."""
    inter = gate_up.shape[-1] // 2
    rows = gate_up.reshape(-1, gate_up.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], inter, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] > 0:
        grid = (rows.shape[0], triton.cdiv(inter, _BLOCK))
        _silu_and_mul_kernel[grid](rows, out, inter, rows.stride(0), out.stride(0), BLOCK=_BLOCK, num_warps=4)
    return out.view(*gate_up.shape[:-1], inter)
