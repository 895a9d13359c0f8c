"""GGML block-quantized linears and embedding lookups through sprig's C kernel (`kernels/csrc/block_quant.c`).

The weight stays the GGUF file's blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, and sprig's Q4_G128 that AWQ / GPTQ
checkpoints become; uint8 [N, row_bytes]): nothing is re-laid out at load, so the resident weight is the file's
bytes.

Integer activations or bf16 ones? Both, by size, as measured here (Zen 4, one thread, a 1536 x 576 Q4_1 weight,
the minimum of repeated calls, microseconds; the bf16 vector kernel on a bf16 copy of the weight for scale):

    rows M                                        1     4     8    12    16    32
    int8 activations c (q8_0), VPDPBUSD          57   126   245   362   481   965
    c + l / 128 (two VPDPBUSD), the kernel now   63   163   313   464     -     -
    bf16 activations, weights widened           231   247   283   311   343   474
    bf16 vector kernel, bf16 weight              30    42    78   105   137   266

At decode sizes a product reads each weight for a few rows only: the integer path decodes 64 weights per zmm in
registers and multiplies 64 weight-activation pairs per VPDPBUSD, while widening every weight to bf16 costs more
than the whole integer product. From about 8 rows the widening is paid once for many rows and bf16 wins (no
activation quantization, and vec_gemm.c's register-blocked panels). So: integer activations below 8 rows,
bf16 activations with the weights widened to bf16 panels from 8 rows (bf16 models on AVX512_BF16 builds).

The integer activations are not llama.cpp's q8_0 (one int8 code per value, per block of 32): with it SmolLM2-135M's
first answer token flipped (its top two logits are 0.09 apart; q8_0 moved them by 0.1-0.3). Each value gets a
second code for its rounding residual, x ~= xs (c + l / 128), an error of xs / 256 instead of xs / 2, for a
second VPDPBUSD: 10% more time at M = 1, 30% at M = 4 (the table's second row). With the weight in cache the bf16
kernel on a bf16 weight is faster still at M = 1; on a weight that streams from memory (the 49152 x 576 LM head)
Q4_1 takes 1.6-1.9 ms against bf16's 3.0-3.7 ms: it reads 3.2x fewer bytes.

The code path is `int8_isa()` (the int8 kernel's ladder and build conditions, capped by the same `SPRIG_CPU_ISA`:
`avx512*` → AVX512_VNNI, `avx2` → AVX-VNNI where the build has it else AVX2, `portable`); `SPRIG_CPU_ISA=none` or
no C kernels leave the layers to the torch reference (`kernels/ggml_quants.py`). The bf16-widened prefill path
belongs to the AVX512_VNNI path (every CPU with AVX512_BF16 has VNNI).
"""

from __future__ import annotations

import torch

from sprig.kernels.cpu_int8 import Int8Isa, int8_isa
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels
from sprig.kernels.ggml_quants import GGMLType

KERNEL_TYPES = (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
                GGMLType.Q4_G128)
DTYPES = (torch.float32, torch.bfloat16)  # activations / outputs the kernel takes
MAX_K = 65536


def bq_supports(qtype: GGMLType, k: int, dtype: torch.dtype, weight: torch.Tensor) -> bool:
    """Whether the C kernel takes a `qtype` weight of `k` inputs with activations of `dtype`: a block format it
    knows, fp32 or bf16, on the CPU, the C kernels built and not turned off."""
    return (qtype in KERNEL_TYPES and dtype in DTYPES and weight.device.type == "cpu" and 0 < k <= MAX_K
            and int8_isa() is not None)


def bq_linear(x: torch.Tensor, weight: torch.Tensor, qtype: GGMLType, bias: torch.Tensor | None,
              isa: Int8Isa | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] (fp32 or bf16) times the GGML weight [N, row_bytes] (+ bias [N] in x's dtype) → [..., N] in
    `out_dtype` (fp32 or bf16; default x's dtype: the LM head asks for fp32, written from the fp32 sums)."""
    lib = native_kernels()
    chosen = int8_isa() if isa is None else isa
    assert lib is not None and chosen is not None  # bq_supports checked that the library is there
    k, n = x.shape[-1], weight.shape[0]
    flat = x.dim() == 2  # the runner's [tokens, features]: no reshapes (each costs microseconds at decode)
    x2 = x if flat else x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    lda = x2.stride(0) if x2.shape[0] > 1 else k
    out_dtype = out_dtype or x.dtype
    out = torch.empty(x2.shape[0], n, dtype=out_dtype)
    if x2.shape[0]:
        status = lib.bq_linear(x2.data_ptr(), lda, weight.data_ptr(), weight.shape[1], int(qtype),
                               0 if bias is None else bias.data_ptr(), out.data_ptr(), x2.shape[0], n, k,
                               DTYPE_CODES[x.dtype], DTYPE_CODES[out_dtype], int(chosen),
                               torch.get_num_threads())
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
