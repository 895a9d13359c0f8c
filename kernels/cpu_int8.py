"""int8 linear layers through sprig's C kernel (`kernels/csrc/int8_gemm.c`): int8 weights times activations
quantized per row at each call (W8A8), int32 sums on AVX512_VNNI, AVX-VNNI, AVX2 or portable C.

The weight (int8 [N, K] with a float scale per output row, as `--quantization int8` stores it) is re-laid out once
at load (`int8_pack`). The code path is `int8_isa()`: the best this machine and build offer, capped by the same
`SPRIG_CPU_ISA` as the bf16 vector kernel (`avx512*` → AVX512_VNNI, `avx2` → AVX-VNNI where the build has it else
AVX2, `portable`); `SPRIG_CPU_ISA=none` leaves int8 linears to torch's `_weight_int8pack_mm`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import torch
import torch.nn.functional as F

from sprig.kernels.cpu_gemm import PANEL, VecIsa, isa_cap
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels

GROUP_K = 4  # input features one VPDPBUSD lane sums
MAX_K = 65536  # 255 * 127 * K must fit the kernel's int32 sums
DTYPES = (torch.float32, torch.bfloat16)  # activations / outputs the kernel takes


class Int8Isa(IntEnum):
    """The code paths of `int8_gemm.c`, each usable where the ones above it are not."""

    PORTABLE = 0
    AVX2 = 1  # no VNNI: s8 widened to s16, VPMADDWD
    AVX_VNNI = 2  # VPDPBUSD on ymm
    AVX512_VNNI = 3  # VPDPBUSD on zmm


# Which int8 path each SPRIG_CPU_ISA name allows at most (avx2 machines may have AVX-VNNI, the 256-bit VPDPBUSD).
_CAPS = {VecIsa.PORTABLE: Int8Isa.PORTABLE, VecIsa.AVX2: Int8Isa.AVX_VNNI, VecIsa.AVX512: Int8Isa.AVX512_VNNI,
         VecIsa.AVX512_BF16: Int8Isa.AVX512_VNNI}


class Int8Packed(NamedTuple):
    """An int8 weight as `int8_linear` reads it; every array is padded to whole 16-column panels."""

    weight: torch.Tensor  # int8 [N/16, K/4, 16, 4]: per panel and group of 4 inputs, the 16 columns' 4 bytes
    corr: torch.Tensor  # int32 [N]: 128 * the row sums of the codes (removes the activation codes' + 128)
    scale: torch.Tensor  # float32 [N]: per output row
    bias: torch.Tensor | None  # float32 [N]


def int8_pack(weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> Int8Packed:
    """int8 [N, K] codes, their scale per row [N] and an optional bias [N] → the kernel's layout (N padded to a
    multiple of 16 and K to a multiple of 4 with zeros)."""
    n, k = weight.shape
    pad_n, pad_k = -n % PANEL, -k % GROUP_K
    w = F.pad(weight, (0, pad_k, 0, pad_n))
    packed = w.view((n + pad_n) // PANEL, PANEL, (k + pad_k) // GROUP_K, GROUP_K).permute(0, 2, 1, 3).contiguous()
    corr = w.sum(dim=1, dtype=torch.int32) * 128
    padded_bias = None if bias is None else F.pad(bias.float(), (0, pad_n))
    return Int8Packed(packed, corr, F.pad(scale.float(), (0, pad_n)), padded_bias)


def int8_isa() -> Int8Isa | None:
    """The code path `int8_linear` takes here: the best of this build, capped by SPRIG_CPU_ISA (read on every call,
    so tests can set it); None without the C kernels or with SPRIG_CPU_ISA=none."""
    lib = native_kernels()
    cap = None if lib is None else isa_cap()
    return None if lib is None or cap is None else min(Int8Isa(lib.int8_gemm_best_isa()), _CAPS[cap])


def int8_supports(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether `int8_linear` can take this int8 [out, in] weight with activations of `dtype`: on the CPU, fp32 or
    bf16, at most 65536 inputs, the C kernels built and not turned off."""
    return (weight.dtype == torch.int8 and weight.device.type == "cpu" and dtype in DTYPES
            and weight.shape[1] <= MAX_K and int8_isa() is not None)


def int8_linear(x: torch.Tensor, w: Int8Packed, n: int, isa: Int8Isa | None = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] (fp32 or bf16) times the `int8_pack`ed weight of `n` output rows (+ bias) → [..., n] in
    `out_dtype` (fp32 or bf16; default x's dtype).

    Each row of x is quantized to int8 with a scale max|x| / 127 first; `isa` defaults to `int8_isa()`."""
    lib = native_kernels()
    chosen = int8_isa() if isa is None else isa
    assert lib is not None and chosen is not None  # int8_supports checked that the library is there
    k = x.shape[-1]
    flat = x.dim() == 2  # the runner's [tokens, features]: no reshapes (each costs microseconds at decode)
    x2 = x if flat else x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()  # the kernel reads rows `lda` apart, each row contiguous
    lda = x2.stride(0) if x2.shape[0] > 1 else k
    out_dtype = out_dtype or x.dtype
    out = torch.empty(x2.shape[0], n, dtype=out_dtype)
    if x2.shape[0] == 0:
        return out if flat else out.view(*x.shape[:-1], n)
    status = lib.int8_linear(x2.data_ptr(), lda, w.weight.data_ptr(), w.corr.data_ptr(),
                             w.scale.data_ptr(), 0 if w.bias is None else w.bias.data_ptr(), out.data_ptr(),
                             x2.shape[0], n, k, DTYPE_CODES[x.dtype], DTYPE_CODES[out_dtype], int(chosen),
                             torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"int8_linear refused a [{x2.shape[0]}, {k}] x [{n}, {k}] product (status {status})")
    return out if flat else out.view(*x.shape[:-1], n)
