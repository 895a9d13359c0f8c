"""Compile every Triton kernel for a CUDA architecture ahead of time, without a GPU.

The interpreter (TRITON_INTERPRET=1) proves the kernels' math on CPU but accepts programs the GPU compiler
rejects (type changes across loop iterations, shapes too small for `tl.dot`) and says nothing about shared
memory. This lowers each kernel through Triton's real pipeline to a cubin with the ptxas that ships in the
triton wheel, and reports the shared memory each launch configuration needs.

    python -m sprig.kernels.triton_compile_check 90     # sm_90 (H100/H200); 80 for A100

Must run with TRITON_INTERPRET unset (interpreted kernels cannot be compiled). Relies on `triton.compile` and
`ASTSource`, Triton's ahead-of-time entry points, which can move between Triton releases.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

# float32 buffers whatever the activation dtype (the residual stream too: kernels/norm.py residual_dtype)
_PTR_ARGS_FP32 = {"part_out_ptr", "part_lse_ptr", "cs_ptr", "res_ptr", "new_res_ptr", "slot_weight_ptr"}
_PTR_ARGS_I64 = {"rows_ptr", "table_ptr", "slots_ptr", "pos_ptr", "ids_ptr", "tile_expert_ptr"}
_PTR_ARGS_U8 = {"raw_ptr"}  # GGML block-quantized weights, raw bytes
_PTR_ARGS_I32 = {"lens_ptr", "seqs_ptr", "blocks_ptr", "mask_ptr"}
_FLOAT_ARGS = {"eps", "sm_scale_log2", "softcap_log2"}
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}  # bytes of shared memory per block


@dataclass(frozen=True)
class Compiled:
    """One kernel compiled for one configuration."""

    kernel: str
    config: str
    shared_bytes: int


# KV_KIND (kernels/triton_kv_quant.py) -> the pool's code and scale pointer types (model dtype: the cache's own)
_KV_POINTERS = {3: ("i8", "i16"), 4: ("u8", "i16"), 5: ("u8", "i16")}


def _signature(fn, dtype: str, constexprs: dict) -> dict[str, str]:
    """Triton type strings for `fn`'s arguments: pointers by name, the rest i32 or fp32."""
    sig = {}
    codes, scales = _KV_POINTERS.get(constexprs.get("KV_KIND", 0), (dtype, dtype))
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("kc_ptr", "vc_ptr"):
            sig[name] = f"*{codes}"
        elif name in ("ks_ptr", "vs_ptr"):
            sig[name] = f"*{scales}"
        elif name in _PTR_ARGS_FP32:
            sig[name] = "*fp32"
        elif name in _PTR_ARGS_I64:
            sig[name] = "*i64"
        elif name in _PTR_ARGS_I32:
            sig[name] = "*i32"
        elif name in _PTR_ARGS_U8:
            sig[name] = "*u8"
        elif name.endswith("_ptr"):
            sig[name] = f"*{dtype}"
        else:
            sig[name] = "fp32" if name in _FLOAT_ARGS else "i32"
    return sig


def _configs(dtype: str, head_dim: int) -> list[tuple[Any, dict, int]]:
    """(kernel, constexprs, num_warps) for every kernel as the wrappers launch it: the attention kernels over a
    pool in the model dtype and over int8 and fp8 codes."""
    plain = _plain_configs(dtype, head_dim)
    quantized = [(fn, dict(c, KV_KIND=kind, **({"QMAX": qmax} if "QMAX" in c else {})), w)
                 for kind, qmax in ((3, 127.0), (4, 448.0), (5, 57344.0))
                 for fn, c, w in plain if "KV_KIND" in c]
    return plain + quantized + _block_quant_configs(dtype)


def _block_quant_configs(dtype: str) -> list[tuple[Any, dict, int]]:
    """The GGML block-quant kernels as `triton_block_quant` launches them, for every type it reads. The GEMV and
    row lookup touch the activation dtype only in one load and one store, so they compile for fp16 alone."""
    from sprig.kernels import triton_block_quant as bq

    configs: list[tuple[Any, dict, int]] = []
    for qtype in bq.SUPPORTED_TYPES:
        fmt = bq.format_constexprs(qtype)
        configs.append(
            (bq._gemm_kernel, dict(fmt, **bq.GEMM_TILE, DOT_PRECISION="ieee" if dtype == "fp32" else "tf32"), 4))
        if dtype == "fp16":
            configs += [(bq._gemv_kernel, dict(fmt, **bq.GEMV_TILE), 4), (bq._rows_kernel, dict(fmt, **bq.ROWS_TILE), 4)]
    return configs


def _plain_configs(dtype: str, head_dim: int) -> list[tuple[Any, dict, int]]:
    import triton.language as tl

    from sprig.kernels import (
        triton_activation,
        triton_attention,
        triton_bitmask,
        triton_moe,
        triton_norm,
        triton_rope,
    )

    tl_dtype = {"fp16": tl.float16, "bf16": tl.bfloat16, "fp32": tl.float32}[dtype]
    prec = "ieee" if dtype == "fp32" else "tf32"
    block_n, warps = (32, 8) if dtype == "fp32" or head_dim > 128 else (64, 4)
    attn = dict(PAGE_SIZE=16, BLOCK_D=head_dim, DOT_PRECISION=prec, KV_KIND=0)
    return [
        (triton_attention._decode_split_kernel, dict(attn, NUM_SPLITS=8, BLOCK_G=16, BLOCK_N=64), 4),
        (triton_attention._decode_reduce_kernel, dict(NUM_SPLITS=8, BLOCK_S=8, BLOCK_D=head_dim), 1),
        (triton_attention._extend_kernel, dict(attn, BLOCK_M=64, BLOCK_N=block_n), warps),
        (triton_attention._store_kv_kernel, dict(BLOCK_H=8, BLOCK_D=head_dim, KV_KIND=0, QMAX=1.0), 4),
        (
            triton_norm._rms_norm_kernel,
            dict(FUSE_ADD=True, IN_DTYPE=tl.float32, OUT_DTYPE=tl_dtype, BLOCK=8192),
            8,
        ),
        (
            triton_rope._rope_kernel,
            dict(BLOCK_HQ=64, BLOCK_HK=8, BLOCK_HALF=head_dim // 2),
            4,
        ),
        (triton_activation._silu_and_mul_kernel, dict(BLOCK=1024), 4),
        (triton_bitmask._bitmask_kernel, dict(BLOCK=4096), 4),
        (triton_moe._expert_gemm_kernel, dict(ROW_DIV=2, APPLY_WEIGHT=True, BLOCK_M=triton_moe.BLOCK_M,
                                              BLOCK_N=triton_moe.BLOCK_N, BLOCK_K=triton_moe.BLOCK_K,
                                              DOT_PRECISION=prec), 4),
    ]


def compile_all(arch: int, dtypes: tuple[str, ...] = ("fp16", "fp32"), head_dim: int = 128) -> list[Compiled]:
    """Compile every kernel for sm_`arch`; raises on a compile error or a config over the shared-memory limit."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("unset TRITON_INTERPRET: interpreted kernels cannot be compiled")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    results = []
    for dtype in dtypes:
        for fn, constexprs, warps in _configs(dtype, head_dim):
            src = ASTSource(fn, _signature(fn, dtype, constexprs), constexprs=constexprs)
            kernel = triton.compile(src, target=target, options={"num_warps": warps, "num_stages": 2})
            shared = int(kernel.metadata.shared)
            kind = constexprs.get("KV_KIND", 0)
            config = f"{dtype} D={head_dim} warps={warps}" + (f" kv_kind={kind}" if kind else "")
            config += f" ggml={constexprs['QTYPE']}" if "QTYPE" in constexprs else ""
            if shared > SHARED_LIMIT.get(arch, min(SHARED_LIMIT.values())):
                raise RuntimeError(f"{fn.__name__} {config} needs {shared} B of shared memory on sm_{arch}")
            results.append(Compiled(fn.__name__, config, shared))
    return results


def main(argv: list[str]) -> int:
    """Compile for the architecture given as the first argument (default 90) and print the shared memory."""
    arch = int(argv[0]) if argv else 90
    for item in compile_all(arch):
        print(f"sm_{arch} {item.kernel:24} {item.config:22} shared {item.shared_bytes:>7} B")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
