"""The decoder's linear layer and the kernel it runs on the CPU: torch, oneDNN, sprig's vector or AMX kernel,
chosen once at load (`cpu_packing.py`)."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn

from sprig.kernels.cpu_gemm import (
    VecIsa,
    amx_linear,
    amx_supports,
    vec_isa,
    vec_linear_fn,
    vec_supports,
    vnni_pack,
)


class LinearKernel(Enum):
    """Which implementation a `Linear` runs: chosen once at load, for the machine (`Linear.pack_for_cpu`)."""

    TORCH = "torch"  # F.linear on the plain weight
    ONEDNN = "onednn"  # oneDNN on its blocked layout
    AMX = "amx"  # sprig's AMX tile kernel
    VEC = "vec"  # sprig's vector kernel (AVX512_BF16 / AVX-512 / AVX2 / portable C)


class Linear(nn.Module):
    """y = x W^T (+ b), weight [out, in] in the model dtype; y in `out_dtype` (default: the model dtype), summed
    in fp32 and rounded once (the LM head: fp32, never rounded)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 out_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype), requires_grad=False) if bias else None
        self.out_dtype = out_dtype or dtype
        self.kernel = LinearKernel.TORCH
        self.isa: VecIsa | None = None  # the vector kernel's code path, with LinearKernel.VEC
        self.packed: torch.Tensor | None = None  # the weight in oneDNN's blocked layout, see pack_for_onednn
        self.register_buffer("vnni", None, persistent=False)  # the weight in VNNI pair order, see pack_for_cpu
        self.fast: Callable[[torch.Tensor], torch.Tensor] | None = None  # the vector kernel, bound to the weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast is not None:
            return self.fast(x)
        if self.kernel is LinearKernel.AMX:
            return amx_linear(x, self.vnni, self.bias, self.out_dtype)
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        if self.out_dtype != x.dtype:
            return widening_linear(x, self.weight, self.bias, self.out_dtype)
        return F.linear(x, self.weight, self.bias)

    def pack_for_cpu(self) -> LinearKernel:
        """Re-lay the weight out for sprig's CPU kernel where one takes it: the AMX kernel on CPUs with AMX
        (oneDNN is slow on this model family's shapes, see `kernels/csrc/amx_gemm.c`), else the vector kernel
        (at decode sizes it streams the weight 1.5-2x faster than oneDNN, see `kernels/csrc/vec_gemm.c`).
        Returns the kernel chosen: TORCH when neither takes the weight (bf16 only, whole 16-column panels)."""
        weight = self.weight.detach()
        if amx_supports(weight):
            self.kernel = LinearKernel.AMX
        elif vec_supports(weight):
            self.kernel, self.isa = LinearKernel.VEC, vec_isa()
        else:
            return self.kernel
        self.vnni = vnni_pack(weight)  # a buffer: the loader moves all of them onto huge pages
        if self.isa is not None:
            self.fast = vec_linear_fn(self.vnni, self.bias, self.isa, weight.shape[0], self.out_dtype)
        self._drop_plain_weight()
        return self.kernel

    def widen_weight(self) -> None:
        """Hold the weight (and bias) in `out_dtype`, for a linear whose output is wider than its weight and that no
        sprig kernel takes: F.linear then sums and writes in that dtype, and widening the weight on every call
        instead costs ~20x the product at decode sizes. Exact (every bf16/fp16 value is a float32)."""
        self.weight = nn.Parameter(self.weight.detach().to(self.out_dtype), requires_grad=False)
        if self.bias is not None:
            self.bias = nn.Parameter(self.bias.detach().to(self.out_dtype), requires_grad=False)

    def pack_for_onednn(self) -> None:
        """Hold the weight only in oneDNN's blocked layout, which its AMX/AVX-512 kernels read as is.

        F.linear re-lays the weight out on every call; measured here on bf16 decode shapes, the packed weight
        runs 1.3-1.4x faster, bit-identical. The plain weight is dropped (to a meta tensor that keeps its shape).
        """
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), batch_size=64)
        self.kernel = LinearKernel.ONEDNN
        self._drop_plain_weight()

    def _drop_plain_weight(self) -> None:
        """Keep only the weight's shape (a meta tensor) once another layout holds its values."""
        self.weight = nn.Parameter(torch.empty(self.weight.shape, dtype=self.weight.dtype, device="meta"),
                                   requires_grad=False)


def widening_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    out_dtype: torch.dtype) -> torch.Tensor:
    """x W^T (+ b) written in `out_dtype`, wider than x: cuBLAS writes its fp32 sums as they are
    (`torch.mm(..., out_dtype=)`); elsewhere the operands are widened (exact; a no-op on a weight `widen_weight`
    widened already) and multiplied in `out_dtype`."""
    if x.is_cuda and weight.dtype == x.dtype:
        y = torch.mm(x.reshape(-1, x.shape[-1]), weight.t(), out_dtype=out_dtype).view(*x.shape[:-1], -1)
        return y if bias is None else y + bias.to(out_dtype)
    return F.linear(x.to(out_dtype), weight.to(out_dtype), None if bias is None else bias.to(out_dtype))


def can_pack_for_onednn(dtype: torch.dtype, device: torch.device | str) -> bool:
    """oneDNN packing helps bf16/fp16 linears on CPUs whose oneDNN build has kernels for that dtype."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return dtype == torch.float16 and torch.ops.mkldnn._is_mkldnn_fp16_supported()
