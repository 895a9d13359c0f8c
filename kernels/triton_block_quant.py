"""Matmuls and row lookups over GGML block-quantized weights in Triton, reading the raw GGUF blocks in place.

A weight [N, K] is N rows of `K / block * type_size` bytes exactly as a GGUF file stores them (GGML's layouts,
llama.cpp's ggml-common.h): Q8_0, Q4_0, Q4_1 (blocks of 32) and Q4_K, Q5_K, Q6_K (super-blocks of 256). No
dequantized copy of the weight is made: each program decodes the tile of blocks it multiplies, in registers.
`_dequant_tile` is the one decoder; it works on a [rows, groups, 32 or 16] view of the tile so that each scale and
minimum is decoded once per group of elements that share it, then flattened to [rows, BLOCK_K].

- `block_quant_matmul(x, raw, qtype)`: x [M, K] (fp16, bf16, fp32) @ W.T -> [M, N] in x's dtype, fp32 accumulation.
  Up to `GEMV_MAX_M` rows: one program per (row tile of W, row of x), the decoded tile times x in fp32 (decode
  is bandwidth-bound on the weight; a `tl.dot` needs 16 rows of x and would waste most of them). More rows: a tiled
  GEMM whose decoded weight tile is cast to x's dtype for `tl.dot` (as the torch path casts the dequantized
  weight before `F.linear`).
- `block_quant_rows(raw, ids, qtype, dtype)`: rows `ids` of the weight, dequantized (the embedding lookup); the
  same values as dequantizing in torch and casting (compiled without FMA contraction, so bitwise).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sprig.kernels.ggml_quants import GGMLType
from sprig.kernels.triton_utils import dot_precision

GEMV_MAX_M = 8  # rows of x up to which the GEMV launch is used (tl.dot's 16-row minimum would waste half or more)
GEMV_TILE = {"BLOCK_N": 16, "BLOCK_K": 128}
GEMM_TILE = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}  # BLOCK_M shrinks to 16 or 32 for fewer rows of x
ROWS_TILE = {"BLOCK_N": 4, "BLOCK_K": 256}

# The GGML type ids as Triton constexprs, for the kernels' per-format branches.
Q4_0 = tl.constexpr(int(GGMLType.Q4_0))
Q4_1 = tl.constexpr(int(GGMLType.Q4_1))
Q8_0 = tl.constexpr(int(GGMLType.Q8_0))
Q5_K = tl.constexpr(int(GGMLType.Q5_K))
Q6_K = tl.constexpr(int(GGMLType.Q6_K))
SUPPORTED_TYPES = (GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K)


def format_constexprs(qtype: GGMLType) -> dict[str, int]:
    """The kernels' format arguments for `qtype`: its id, weights and bytes per block, and weights per scale."""
    return {"QTYPE": int(qtype), "BLOCK": qtype.block_size, "TYPE_SIZE": qtype.type_size,
            "GROUP": 16 if qtype is GGMLType.Q6_K else 32}  # fmt: skip


@triton.jit
def _u8(ptr, mask):
    """Bytes at ptr as int32 (masked bytes read 0)."""
    return tl.load(ptr, mask=mask, other=0).to(tl.int32)


@triton.jit
def _i8(ptr, mask):
    """Signed bytes at ptr as fp32."""
    return tl.load(ptr, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)


@triton.jit
def _f16(ptr, mask):
    """Little-endian fp16 at any byte address (GGML's scales need not be 2-aligned), as fp32."""
    lo = tl.load(ptr, mask=mask, other=0).to(tl.uint16)
    hi = tl.load(ptr + 1, mask=mask, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _k4_scale_min(scales_ptr, sub, mask):
    """Q4_K / Q5_K: the 6-bit scale and min of sub-block `sub` (0..7) from a super-block's 12 scale bytes."""
    a = _u8(scales_ptr + sub % 4, mask)  # byte sub (sub < 4) or sub - 4 (sub >= 4)
    c = _u8(scales_ptr + sub + 4, mask)
    e = _u8(scales_ptr + sub, mask)
    low = sub < 4
    sc = tl.where(low, a & 63, (c & 0xF) | ((a >> 6) << 4))
    mn = tl.where(low, c & 63, (c >> 4) | ((e >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)


@triton.jit
def _dequant_tile(raw_ptr, row_off, row_ok, k0, K, QTYPE: tl.constexpr, BLOCK: tl.constexpr,
                  TYPE_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Weights [BLOCK_N, BLOCK_K] (fp32) of the rows at byte offsets row_off, columns k0.. (k0 a multiple of
    GROUP); masked rows and columns past K read 0."""
    grp = k0 // GROUP + tl.arange(0, BLOCK_K // GROUP)  # the row's scale groups this tile covers
    ok = row_ok[:, None] & (grp < K // GROUP)[None, :]  # [BLOCK_N, groups]
    sub = (grp % (BLOCK // GROUP))[None, :]  # group within its block
    base = raw_ptr + row_off[:, None] + ((grp // (BLOCK // GROUP)) * TYPE_SIZE)[None, :]  # the group's block
    ok3 = ok[:, :, None]
    base3 = base[:, :, None]
    sub3 = sub[:, :, None]
    j = tl.arange(0, GROUP)[None, None, :]  # element within its group
    if QTYPE == Q8_0:  # d, qs[32]
        w = _i8(base3 + 2 + j, ok3) * _f16(base, ok)[:, :, None]
    elif QTYPE == Q4_0:  # d, qs[16]: element j in the low nibble of byte j, j + 16 in the high one
        nib = (_u8(base3 + 2 + j % 16, ok3) >> (4 * (j // 16))) & 0xF
        w = (nib - 8).to(tl.float32) * _f16(base, ok)[:, :, None]
    elif QTYPE == Q4_1:  # d, m, qs[16]
        nib = (_u8(base3 + 4 + j % 16, ok3) >> (4 * (j // 16))) & 0xF
        w = nib.to(tl.float32) * _f16(base, ok)[:, :, None] + _f16(base + 2, ok)[:, :, None]
    elif QTYPE == Q6_K:  # ql[128], qh[64], scales[16] (int8), d; groups of 16
        half = sub3 // 8
        quarter = (sub3 % 8) // 2  # which 32 of the half's 128 elements
        lane = (sub3 % 2) * 16 + j  # position within those 32
        lo = (_u8(base3 + half * 64 + (quarter % 2) * 32 + lane, ok3) >> (4 * (quarter // 2))) & 0xF
        hi = (_u8(base3 + 128 + half * 32 + lane, ok3) >> (2 * quarter)) & 3
        scale = _f16(base + 208, ok) * _i8(base + 192 + sub, ok)
        w = ((lo | (hi << 4)) - 32).to(tl.float32) * scale[:, :, None]
    else:  # Q4_K: d, dmin, scales[12], qs[128]; Q5_K adds qh[32] before qs; groups of 32
        sc, mn = _k4_scale_min(base + 4, sub, ok)
        scale = _f16(base, ok) * sc
        minimum = _f16(base + 2, ok) * mn
        qs = base3 + (48 if QTYPE == Q5_K else 16) + (sub3 // 2) * 32 + j  # sub-blocks 2i, 2i+1 share 32 bytes
        q = (_u8(qs, ok3) >> (4 * (sub3 % 2))) & 0xF
        if QTYPE == Q5_K:
            q = q | (((_u8(base3 + 16 + j, ok3) >> sub3) & 1) << 4)
        w = q.to(tl.float32) * scale[:, :, None] - minimum[:, :, None]
    return tl.reshape(w, (BLOCK_N, BLOCK_K))


@triton.jit
def _gemv_kernel(x_ptr, raw_ptr, out_ptr, N, K, raw_stride, x_stride, out_stride, QTYPE: tl.constexpr,
                 BLOCK: tl.constexpr, TYPE_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.program_id(1).to(tl.int64)
    row_ok = rows < N
    row_off = rows.to(tl.int64) * raw_stride
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w = _dequant_tile(raw_ptr, row_off, row_ok, k0, K, QTYPE, BLOCK, TYPE_SIZE, GROUP, BLOCK_N, BLOCK_K)
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + m * x_stride + ks, mask=ks < K, other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], 1)
    tl.store(out_ptr + m * out_stride + rows, acc.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _gemm_kernel(x_ptr, raw_ptr, out_ptr, M, N, K, raw_stride, x_stride, out_stride, QTYPE: tl.constexpr,
                 BLOCK: tl.constexpr, TYPE_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr):
    ms = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # axis 0 fastest: the row tiles sharing a weight
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # tile run side by side and hit it in L2
    m_ok, row_ok = ms < M, rows < N
    row_off = rows.to(tl.int64) * raw_stride
    x_rows = x_ptr + ms.to(tl.int64)[:, None] * x_stride
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_rows + ks[None, :], mask=m_ok[:, None] & (ks < K)[None, :], other=0.0)
        w = _dequant_tile(raw_ptr, row_off, row_ok, k0, K, QTYPE, BLOCK, TYPE_SIZE, GROUP, BLOCK_N, BLOCK_K)
        acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc, input_precision=DOT_PRECISION)
    out = out_ptr + ms.to(tl.int64)[:, None] * out_stride + rows[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & row_ok[None, :])


@triton.jit
def _rows_kernel(raw_ptr, ids_ptr, out_ptr, n_ids, N, K, raw_stride, out_stride, QTYPE: tl.constexpr,
                 BLOCK: tl.constexpr, TYPE_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    picks = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ids = tl.load(ids_ptr + picks, mask=picks < n_ids, other=0).to(tl.int64)
    row_ok = (picks < n_ids) & (ids >= 0) & (ids < N)  # an id out of range reads a zero row, never out of bounds
    k0 = tl.program_id(1) * BLOCK_K
    w = _dequant_tile(raw_ptr, ids * raw_stride, row_ok, k0, K, QTYPE, BLOCK, TYPE_SIZE, GROUP, BLOCK_N, BLOCK_K)
    ks = k0 + tl.arange(0, BLOCK_K)
    out = out_ptr + picks.to(tl.int64)[:, None] * out_stride + ks[None, :]
    tl.store(out, w.to(out_ptr.dtype.element_ty), mask=(picks < n_ids)[:, None] & (ks < K)[None, :])


def weight_cols(raw: torch.Tensor, qtype: GGMLType) -> int:
    """K, the columns of the weight whose raw GGML rows are `raw` (uint8 [N, K / block * type_size]); a
    ValueError naming the argument for a type these kernels do not read or bytes that are not whole blocks."""
    if qtype not in SUPPORTED_TYPES:
        names = ", ".join(t.name for t in SUPPORTED_TYPES)
        raise ValueError(f"qtype: the Triton block-quant kernels read {names}, not {qtype!r}")
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.stride(1) != 1:
        raise ValueError(f"raw: expected a uint8 [rows, row_bytes] tensor with contiguous rows, got {raw.dtype} "
                         f"{tuple(raw.shape)} strides {raw.stride()}")  # fmt: skip
    if raw.shape[1] % qtype.type_size:
        raise ValueError(f"raw: {raw.shape[1]} bytes per row is not a whole number of {qtype.name} blocks "
                         f"({qtype.type_size} bytes)")  # fmt: skip
    return raw.shape[1] // qtype.type_size * qtype.block_size


def block_quant_matmul(x: torch.Tensor, raw: torch.Tensor, qtype: GGMLType) -> torch.Tensor:
    """x [..., K] (fp16 / bf16 / fp32) times the transposed GGML weight held as raw rows [N, K / block *
    type_size] (uint8, same device): [..., N] in x's dtype, accumulated in fp32."""
    cols = weight_cols(raw, qtype)
    if x.shape[-1] != cols:
        raise ValueError(f"x: last dim {x.shape[-1]} != the weight's {cols} columns")
    x2 = x.reshape(-1, cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    n_rows, m_rows = raw.shape[0], x2.shape[0]
    out = torch.empty(m_rows, n_rows, dtype=x.dtype, device=x.device)
    if m_rows == 0 or n_rows == 0:
        return out.view(*x.shape[:-1], n_rows)
    consts = format_constexprs(qtype)
    if m_rows <= GEMV_MAX_M:
        _gemv_kernel[(triton.cdiv(n_rows, GEMV_TILE["BLOCK_N"]), m_rows)](
            x2, raw, out, n_rows, cols, raw.stride(0), x2.stride(0), out.stride(0), **consts, **GEMV_TILE,
            num_warps=4,
        )  # fmt: skip
    else:
        tile = dict(GEMM_TILE, BLOCK_M=min(GEMM_TILE["BLOCK_M"], max(16, triton.next_power_of_2(m_rows))))
        _gemm_kernel[(triton.cdiv(m_rows, tile["BLOCK_M"]), triton.cdiv(n_rows, tile["BLOCK_N"]))](
            x2, raw, out, m_rows, n_rows, cols, raw.stride(0), x2.stride(0), out.stride(0), **consts, **tile,
            DOT_PRECISION=dot_precision(x.dtype), num_warps=4, num_stages=2,
        )  # fmt: skip
    return out.view(*x.shape[:-1], n_rows)


def block_quant_rows(raw: torch.Tensor, ids: torch.Tensor, qtype: GGMLType, dtype: torch.dtype = torch.float32
                     ) -> torch.Tensor:
    """Rows `ids` (any shape, integer, same device) of the GGML weight held as raw rows, dequantized to `dtype`:
    [*ids.shape, K]. An id outside [0, N) gives a zero row (the caller validates token ids)."""
    cols = weight_cols(raw, qtype)
    flat = ids.reshape(-1)
    if flat.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"ids: expected int32 or int64, got {ids.dtype}")
    out = torch.empty(flat.numel(), cols, dtype=dtype, device=raw.device)
    if flat.numel() > 0:
        grid = (triton.cdiv(flat.numel(), ROWS_TILE["BLOCK_N"]), triton.cdiv(cols, ROWS_TILE["BLOCK_K"]))
        _rows_kernel[grid](
            raw, flat, out, flat.numel(), raw.shape[0], cols, raw.stride(0), out.stride(0),
            **format_constexprs(qtype), **ROWS_TILE, num_warps=4, enable_fp_fusion=False,
        )  # fmt: skip
    return out.view(*ids.shape, cols)
