"""The quantized KV cache's codes in Triton (`kernels/kv_quant.py` is the reference): make and widen them.

Codes are made and widened with integer bit operations, giving the bytes torch and the C kernels write
(`csrc/kv_quant.h`), so no fp8 support is needed from Triton (nor from its interpreter); fp8 pools are passed
as uint8 views, scales as bf16 bits. KV_KIND: 0 the model dtype, 3 int8, 4 fp8 e4m3, 5 fp8 e5m2.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rint(y):
    """Round to the nearest integer, ties to even (as torch.round), on fp32 values."""
    f = tl.floor(y)
    frac = y - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    return tl.where((frac > 0.5) | ((frac == 0.5) & odd), f + 1.0, f)


@triton.jit
def _fp8_code(y, MANT: tl.constexpr, BIAS: tl.constexpr):
    """fp32 values (within the format's range) as fp8 bytes, rounded to nearest even (kv_quant.h's fp8_from_abs)."""
    a = tl.abs(y)
    sub = _rint(a * (2.0 ** (BIAS - 1 + MANT))).to(tl.uint32)  # subnormals: a count of the smallest step
    u = a.to(tl.uint32, bitcast=True)
    u = u + ((1 << (22 - MANT)) - 1) + ((u >> (23 - MANT)) & 1)
    normal = (u >> (23 - MANT)) - ((127 - BIAS) << MANT)
    mag = tl.where(a < 2.0 ** (1 - BIAS), sub, normal)
    sign = (y.to(tl.uint32, bitcast=True) >> 24) & 0x80
    return (mag | sign).to(tl.uint8)


@triton.jit
def store_rows(x, cache_ptrs, scale_ptrs, valid, head_ok, QMAX: tl.constexpr, KV_KIND: tl.constexpr):
    """Write rows x [H, D] (fp32) to the pool: as they are (KV_KIND 0) or as codes plus a bf16 scale per row."""
    if KV_KIND == 0:
        tl.store(cache_ptrs, x.to(cache_ptrs.dtype.element_ty), mask=valid)
    else:
        amax = tl.maximum(tl.max(tl.abs(x), 1), 1e-20)
        u = (amax / QMAX).to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000  # to bf16, nearest even, as torch rounds
        scale = u.to(tl.float32, bitcast=True)
        y = tl.minimum(tl.maximum(x / scale[:, None], -QMAX), QMAX)
        if KV_KIND == 3:
            codes = _rint(y).to(tl.int8)
        elif KV_KIND == 4:
            codes = _fp8_code(y, 3, 7)
        else:
            codes = _fp8_code(y, 2, 15)
        tl.store(cache_ptrs, codes, mask=valid)
        tl.store(scale_ptrs, (u >> 16).to(tl.uint16).to(tl.int16, bitcast=True), mask=head_ok)


@triton.jit
def load_kv(head_ptr, scale_head_ptr, rows, row_stride, scale_stride, d, mask, row_ok, KV_KIND: tl.constexpr,
             OUT_DTYPE: tl.constexpr):
    """Keys or values [len(rows), D] of one kv head of the pool in OUT_DTYPE: as stored, or codes times the
    scale of their row (KV_KIND 3 int8, 4 fp8 e4m3, 5 fp8 e5m2); masked entries read as 0."""
    if KV_KIND == 0:
        return tl.load(head_ptr + rows[:, None] * row_stride + d[None, :], mask=mask, other=0.0)
    raw = tl.load(head_ptr + rows[:, None] * row_stride + d[None, :], mask=mask, other=0)
    if KV_KIND == 3:
        x = raw.to(tl.float32)
    else:
        b = raw.to(tl.uint16)
        if KV_KIND == 5:
            x = (b << 8).to(tl.float16, bitcast=True).to(tl.float32)  # e5m2 is the top byte of an fp16
        else:  # e4m3's exponent and mantissa 8 bits down in an fp16: 2^-8 times the value
            bits = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
            x = bits.to(tl.float16, bitcast=True).to(tl.float32) * 256.0
    scale = tl.load(scale_head_ptr + rows * scale_stride, mask=row_ok, other=0).to(tl.int16)  # why: `other`
    # may widen the compiled load to i32 (the interpreter keeps i16); the value is the same
    scale = (scale.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return (x * scale[:, None]).to(OUT_DTYPE)
