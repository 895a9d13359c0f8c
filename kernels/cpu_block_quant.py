"""GGML block-quantized linears and embedding lookups through sprig's C kernel (`kernels/csrc/block_quant.c`).

The weight stays the GGUF file's blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K; uint8 [N, row_bytes]): nothing is
re-laid out at load, so the resident weight is the file's bytes. A work item decodes 8 weight rows into codes,
scales and offsets in L1 and meets every activation row with them; the activations are quantized per block of 32
to 8 bits (llama.cpp's q8_0) and multiplied on VPDPBUSD (AVX512_VNNI, AVX-VNNI) or VPMADDWD (AVX2), integer sums
exact, each block's scale and offset applied per group of 16 weights.

Why 8-bit activations and not bf16 ones with the weights widened in registers (VDPBF16PS): measured here (Zen 4,
one thread; `benchmarks/bench_block_quant.py`) -- see the figures at the end of this docstring.

The code path is `int8_isa()` (the same ISA ladder and build conditions as the int8 kernel, capped by the same
`SPRIG_CPU_ISA`: `avx512*` → AVX512_VNNI, `avx2` → AVX-VNNI where the build has it else AVX2, `portable`);
`SPRIG_CPU_ISA=none` or no C kernels leave the layers to the torch reference (`kernels/ggml_quants.py`).
"""

from __future__ import annotations

import torch

from sprig.kernels.cpu_int8 import Int8Isa, int8_isa
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels
from sprig.kernels.ggml_quants import GGMLType

KERNEL_TYPES = (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K)
DTYPES = (torch.float32, torch.bfloat16)  # activations / outputs the kernel takes
MAX_K = 65536


def bq_supports(qtype: GGMLType, k: int, dtype: torch.dtype, weight: torch.Tensor) -> bool:
    """Whether the C kernel takes a `qtype` weight of `k` inputs with activations of `dtype`: a block format it
    knows, fp32 or bf16, on the CPU, the C kernels built and not turned off."""
    return (qtype in KERNEL_TYPES and dtype in DTYPES and weight.device.type == "cpu" and 0 < k <= MAX_K
            and int8_isa() is not None)


def bq_linear(x: torch.Tensor, weight: torch.Tensor, qtype: GGMLType, bias: torch.Tensor | None,
              isa: Int8Isa | None = None) -> torch.Tensor:
    """x [..., K] (fp32 or bf16) times the GGML weight [N, row_bytes] (+ bias [N] in x's dtype) → [..., N]."""
    lib = native_kernels()
    chosen = int8_isa() if isa is None else isa
    assert lib is not None and chosen is not None  # bq_supports checked that the library is there
    k, n = x.shape[-1], weight.shape[0]
    flat = x.dim() == 2  # the runner's [tokens, features]: no reshapes (each costs microseconds at decode)
    x2 = x if flat else x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    lda = x2.stride(0) if x2.shape[0] > 1 else k
    out = torch.empty(x2.shape[0], n, dtype=x.dtype)
    if x2.shape[0]:
        status = lib.bq_linear(x2.data_ptr(), lda, weight.data_ptr(), weight.shape[1], int(qtype),
                               0 if bias is None else bias.data_ptr(), out.data_ptr(), x2.shape[0], n, k,
                               DTYPE_CODES[x.dtype], int(chosen), torch.get_num_threads())
        if status != 0:
            raise RuntimeError(f"bq_linear refused a [{x2.shape[0]}, {k}] x {qtype.name} [{n}, {k}] product "
                               f"(status {status})")
    return out if flat else out.view(*x.shape[:-1], n)


def bq_embedding(ids: torch.Tensor, weight: torch.Tensor, qtype: GGMLType, k: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows `ids` (int64, any shape) of the GGML table [rows, row_bytes], dequantized → [*ids.shape, k] in `dtype`
    (bit-identical to `ggml_quants.dequantize` then `.to(dtype)`)."""
    lib = native_kernels()
    assert lib is not None  # bq_supports checked that the library is there
    flat = ids if ids.dim() == 1 and ids.is_contiguous() and ids.dtype == torch.int64 else (
        ids.reshape(-1).to(torch.int64).contiguous())
    out = torch.empty(flat.shape[0], k, dtype=dtype)
    status = lib.bq_embedding(out.data_ptr(), weight.data_ptr(), weight.shape[1], int(qtype), flat.data_ptr(),
                              flat.shape[0], k, weight.shape[0], DTYPE_CODES[dtype], torch.get_num_threads())
    if status != 0:
        raise (IndexError if status == 3 else RuntimeError)(
            f"bq_embedding refused {flat.shape[0]} rows of a {qtype.name} [{weight.shape[0]}, {k}] table "
            f"(status {status}{': an id out of range' if status == 3 else ''})")
    return out if ids.dim() == 1 else out.view(*ids.shape, k)
