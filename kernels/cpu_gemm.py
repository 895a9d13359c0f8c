"""bf16 linear layers through sprig's C kernels: AMX tiles (`kernels/csrc/amx_gemm.c`) or vector units
(`kernels/csrc/vec_gemm.c`: AVX512_BF16, AVX-512F, AVX2 + FMA, or portable C).

Both read the weight re-laid out once at load (`vnni_pack`) and compute x @ w.T (+ bias) with fp32 accumulation
and bf16 output, like `F.linear` in bf16, or fp32 output (`out_dtype`, the LM head's logits: no rounding at all). The vector kernel picks its code path by `vec_isa()`: the best this
machine and build offer, capped by `SPRIG_CPU_ISA` (`avx512_bf16`, `avx512`, `avx2` or `portable`) so that the
fallbacks run and are tested on any x86 machine; `SPRIG_CPU_ISA=none` leaves the linears to oneDNN.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from enum import IntEnum

import torch
import torch.nn.functional as F

from sprig.kernels.cpu_native import amx_enabled, native_kernels

PANEL = 16  # output columns per packed panel
OUT_CODES = {torch.float32: 0, torch.bfloat16: 1}  # the kernels' `out_dtype` argument
TILE_K = 32  # input features per AMX tile row
AMX_PANEL_N = 32  # output columns per AMX work item


class VecIsa(IntEnum):
    """The code paths of `vec_gemm.c`, each usable where the ones above it are not."""

    PORTABLE = 0
    AVX2 = 1
    AVX512 = 2
    AVX512_BF16 = 3


def vnni_pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] bf16 → [ceil(N/16), K/2, 16, 2]: per 16 output columns (a panel) and per pair of inputs, the 16
    columns' pairs side by side; a 64-byte line per pair, the order VDPBF16PS and AMX B tiles read. A last partial
    panel is padded with zero rows (the kernels write only the N real columns)."""
    n, k = weight.shape
    weight = F.pad(weight, (0, 0, 0, -n % PANEL))
    return weight.view(-1, PANEL, k // 2, 2).permute(0, 2, 1, 3).contiguous()


def _call(kernel, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, n: int, out_dtype: torch.dtype,
          *extra: int) -> torch.Tensor:
    k = packed.shape[1] * 2
    # At decode sizes this wrapper costs as much as a small layer's kernel: no view or copy unless needed.
    x2 = x if x.dim() == 2 and x.is_contiguous() else x.reshape(-1, k).contiguous()
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=out_dtype)
    if m == 0:
        return out.view(*x.shape[:-1], n)
    status = kernel(x2.data_ptr(), packed.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr(), m, n,
                    k, *extra, OUT_CODES[out_dtype], torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"{kernel.__name__} refused a [{m}, {k}] x [{n}, {k}] product (status {status})")
    return out if x2 is x else out.view(*x.shape[:-1], n)


def amx_supports(weight: torch.Tensor) -> bool:
    """Whether `amx_linear` should take this [out, in] weight: bf16 on the CPU, both sizes multiples of 32, AMX
    enabled."""
    n, k = weight.shape
    return (weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and n % AMX_PANEL_N == 0
            and k % TILE_K == 0 and amx_enabled())


def amx_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x [..., K] bf16 times the `vnni_pack`ed [N, K] weight (+ bias [N]) → [..., N] in `out_dtype` (bf16 or
    float32), on AMX tiles."""
    lib = native_kernels()
    assert lib is not None  # amx_supports checked that AMX (so the library) is there
    return _call(lib.amx_linear_bf16, x, packed, bias, packed.shape[0] * PANEL, out_dtype)


@functools.cache
def _cap(value: str | None) -> VecIsa | None:
    if value is None:
        return max(VecIsa)
    names = {isa.name.lower(): isa for isa in VecIsa}
    if value.lower() == "none":
        return None
    if value.lower() not in names:
        raise ValueError(f"SPRIG_CPU_ISA={value!r} is not one of {', '.join([*names, 'none'])}")
    return names[value.lower()]


def isa_cap() -> VecIsa | None:
    """The highest code path `SPRIG_CPU_ISA` allows sprig's vector kernels (read on every call, so tests can set
    it): the one it names, any when unset, None for `none`; ValueError for a name it does not know."""
    return _cap(os.environ.get("SPRIG_CPU_ISA") or None)


def vec_isa() -> VecIsa | None:
    """The code path `vec_linear` takes here: the best of this build, capped by SPRIG_CPU_ISA; None without the C
    kernels or with SPRIG_CPU_ISA=none."""
    lib = native_kernels()
    cap = None if lib is None else isa_cap()
    return None if lib is None or cap is None else min(VecIsa(lib.vec_gemm_best_isa()), cap)


def vec_supports(weight: torch.Tensor) -> bool:
    """Whether `vec_linear` can take this [out, in] weight: bf16 on the CPU, an even number of inputs, the C
    kernels built."""
    return (weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and weight.shape[1] % 2 == 0
            and vec_isa() is not None)


def vec_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
               isa: VecIsa | None = None, n: int | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x [..., K] bf16 times the `vnni_pack`ed [N, K] weight (+ bias [N]) → [..., N] in `out_dtype` (bf16 or
    float32), on vector units (`isa` defaults to `vec_isa()`; `n`, the weight's rows, to the packed rows, which is N
    unless N % 16)."""
    lib = native_kernels()
    chosen = vec_isa() if isa is None else isa
    assert lib is not None and chosen is not None  # vec_supports checked that the library is there
    return _call(lib.vec_linear_bf16, x, packed, bias, packed.shape[0] * PANEL if n is None else n, out_dtype,
                 int(chosen))


def vec_linear_fn(packed: torch.Tensor, bias: torch.Tensor | None, isa: VecIsa, n: int,
                  out_dtype: torch.dtype = torch.bfloat16) -> Callable[[torch.Tensor], torch.Tensor]:
    """`vec_linear` with the weight (of `n` rows), bias, path and output dtype bound once: at decode sizes the
    per-call Python work is a sizeable part of a small layer's time. The tensors may move storage later
    (`t.data = ...`), not be replaced."""
    lib = native_kernels()
    assert lib is not None  # vec_supports checked that the library is there
    code, out_code = int(isa), OUT_CODES[out_dtype]
    k = packed.shape[1] * 2

    def linear(x: torch.Tensor) -> torch.Tensor:
        # The kernel is looked up on every call (not bound): a CPU graph capture swaps the library's functions.
        if x.dim() != 2 or not x.is_contiguous():
            return _call(lib.vec_linear_bf16, x, packed, bias, n, out_dtype, code)
        out = torch.empty((x.shape[0], n), dtype=out_dtype)
        if x.shape[0] and lib.vec_linear_bf16(x.data_ptr(), packed.data_ptr(), 0 if bias is None else bias.data_ptr(),
                                              out.data_ptr(), x.shape[0], n, k, code, out_code,
                                              torch.get_num_threads()) != 0:
            raise RuntimeError(f"vec_linear_bf16 refused a [{x.shape[0]}, {k}] x [{n}, {k}] product")
        return out

    return linear

