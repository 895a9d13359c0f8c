"""bf16 linear layers on Intel AMX through sprig's C kernel (`kernels/csrc/amx_gemm.c`).

The weight is re-laid out once (`amx_pack`) into the tile order the kernel reads; `amx_linear` then computes
x @ w.T (+ bias) with fp32 accumulation and bf16 output, like `F.linear` in bf16.
"""

from __future__ import annotations

import torch

from sprig.kernels.cpu_native import amx_enabled, native_kernels

TILE_K = 32  # input features per tile row pair block
PANEL_N = 32  # output columns per work item


def amx_supports(weight: torch.Tensor) -> bool:
    """Whether `amx_linear` should take this [out, in] weight: bf16 on the CPU, both sizes multiples of 32, AMX
    enabled."""
    n, k = weight.shape
    return (weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and n % PANEL_N == 0
            and k % TILE_K == 0 and amx_enabled())


def amx_pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] bf16 → [N/16, K/32, 16, 16, 2]: per 16 output columns and 32 inputs, the pairs (k even, k odd) of
    each column side by side, the VNNI order of an AMX B tile."""
    n, k = weight.shape
    return weight.view(n // 16, 16, k // TILE_K, 16, 2).permute(0, 2, 3, 1, 4).contiguous()


def amx_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] bf16 times the packed [N, K] weight (+ bias [N]) → [..., N] bf16."""
    n = packed.shape[0] * 16
    k = packed.shape[1] * TILE_K
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k).contiguous()
    out = torch.empty(x2.shape[0], n, dtype=torch.bfloat16)
    if x2.shape[0] == 0:
        return out.view(*lead, n)
    lib = native_kernels()
    assert lib is not None  # amx_supports checked that AMX (so the library) is there
    status = lib.amx_linear_bf16(
        x2.data_ptr(), packed.data_ptr(), 0 if bias is None else bias.contiguous().data_ptr(), out.data_ptr(),
        x2.shape[0], n, k, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"AMX linear refused a [{x2.shape[0]}, {k}] x [{n}, {k}] product (status {status})")
    return out.view(*lead, n)
