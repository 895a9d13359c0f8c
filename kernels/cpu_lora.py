"""The segmented LoRA product through sprig's C kernel (`kernels/csrc/lora.c`): fp32 or bf16 activations, the
pool's fp32 or bf16 A and B, on the vector code path (`vec_isa()`, capped by `SPRIG_CPU_ISA`; AVX512_BF16 runs the AVX-512
path). Other inputs run the torch reference, `kernels/lora.py`. The call touches only raw pointers, so a CPU decode
graph (`runtime/model/cpu_graph.py`) records and replays it."""

from __future__ import annotations

import functools

import torch

from sprig.kernels import lora
from sprig.kernels.cpu_gemm import VecIsa, isa_cap
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels
from sprig.kernels.lora import LoraBatch, LoraWeights


@functools.cache
def built_isa() -> VecIsa | None:
    """The best code path of this build (asked once: a call into the library while a CPU graph records would be
    recorded, and refused)."""
    lib = native_kernels()
    return None if lib is None else VecIsa(lib.vec_gemm_best_isa())


def lora_isa() -> int | None:
    """The C kernel's code path here (`VecIsa`'s, capped by SPRIG_CPU_ISA; AVX512_BF16 runs the AVX-512 one), or
    None where it cannot run."""
    best, cap = built_isa(), isa_cap()
    return None if best is None or cap is None else int(min(best, cap))


def lora_add_(y: torch.Tensor, x: torch.Tensor, w: LoraWeights, batch: LoraBatch, isa: int | None = None) -> None:
    """`kernels.lora.lora_add_` in C where it can run (CPU, fp32 / bf16 rows with unit column stride), on code
    path `isa` (default `lora_isa()`)."""
    isa = lora_isa() if isa is None else isa
    code, wcode = DTYPE_CODES.get(x.dtype), DTYPE_CODES.get(w.a_t.dtype)
    if (isa is None or code not in (0, 1) or wcode not in (0, 1) or y.dtype != x.dtype or x.device.type != "cpu" or x.dim() != 2
            or y.dim() != 2 or x.stride(1) != 1 or y.stride(1) != 1):
        lora.lora_add_(y, x, w, batch)
        return
    lib = native_kernels()
    assert lib is not None  # lora_isa checked
    a_t, b_t = w.a_t, w.b_t
    status = lib.lora_apply(x.data_ptr(), x.stride(0), y.data_ptr(), y.stride(0), a_t.data_ptr(), b_t.data_ptr(),
                            w.ranks.data_ptr(), batch.token_slots.data_ptr(), w.table.data_ptr(), len(w.parts),
                            x.shape[0], a_t.shape[1], y.shape[1], b_t.shape[1], b_t.shape[2], a_t.shape[0], code, wcode,
                            isa, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"lora_apply refused [{x.shape[0]}, {a_t.shape[1]}] rank {b_t.shape[1]} (status {status})")
