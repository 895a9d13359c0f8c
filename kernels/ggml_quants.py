"""GGML's weight formats in plain torch: the reference the C kernels (`kernels/cpu_block_quant.py`) are tested
against, and the fallback where they cannot run.

A 2-D GGML weight [rows, cols] is `rows` rows of `cols / block_size` blocks of `type_size` bytes (the layouts of
llama.cpp's ggml-common.h). `dequantize` decodes rows to float32 doing the same float32 operations in the same order
as the `gguf` package's `gguf.quants.dequantize`, so the two agree bit for bit; `quantize` writes Q8_0, Q4_0 and
Q4_1 blocks bit for bit as `gguf.quants.quantize` does (llama.cpp's reference quantizers). One format is sprig's
own, not GGML's: Q4_G128 holds AWQ / GPTQ checkpoints' 4-bit groups of 128 exactly (`pack_q4_g128` writes it).
"""

from __future__ import annotations

from enum import IntEnum

import torch

QK_K = 256  # weights per K-quant super-block


class GGMLType(IntEnum):
    """The GGML tensor types sprig reads, valued as GGML's type ids (`gguf.GGMLQuantizationType`)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6  # dequantized at load only: no sprig kernel reads it (Gemma 3 270M's Q4_K_M file holds some)
    Q8_0 = 8
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    BF16 = 30
    # sprig's own (no GGUF file holds it; its id is far above GGML's): 128 weights, fp16 scale d at bytes [0, 2),
    # zero z (uint8) at byte 2, byte 3 unused, then 64 bytes of codes (byte i: weight i low, weight i + 64 high);
    # w = d * (q - z), exact in float32. Q4_1's fp16 `m = -z d` would round; a whole byte takes GPTQ v1's z = 16.
    Q4_G128 = 1000

    @property
    def block_size(self) -> int:
        """Weights per block."""
        return _SIZES[self][0]

    @property
    def type_size(self) -> int:
        """Bytes per block."""
        return _SIZES[self][1]

    @property
    def ggml(self) -> bool:
        """A GGML type (one a GGUF file can hold), not sprig's own."""
        return self is not GGMLType.Q4_G128

    @property
    def dequantized_at_load(self) -> bool:
        """No sprig kernel reads it as blocks: a linear of this type is held in the model dtype."""
        return self is GGMLType.Q5_0

    @property
    def quantized(self) -> bool:
        """Block-quantized (not a plain float format)."""
        return self not in (GGMLType.F32, GGMLType.F16, GGMLType.BF16)

    def row_bytes(self, cols: int) -> int:
        """Bytes of one row of `cols` weights; ValueError unless `cols` is a whole number of blocks."""
        if cols % self.block_size:
            raise ValueError(f"{self.name} rows hold multiples of {self.block_size} weights, not {cols}")
        return cols // self.block_size * self.type_size


_SIZES = {GGMLType.F32: (1, 4), GGMLType.F16: (1, 2), GGMLType.BF16: (1, 2), GGMLType.Q4_0: (32, 18),
          GGMLType.Q4_1: (32, 20), GGMLType.Q5_0: (32, 22), GGMLType.Q8_0: (32, 34), GGMLType.Q4_K: (QK_K, 144),
          GGMLType.Q5_K: (QK_K, 176), GGMLType.Q6_K: (QK_K, 210), GGMLType.Q4_G128: (128, 68)}
QUANTIZABLE = (GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1)  # the types `quantize` writes


def ggml_type(type_id: int) -> GGMLType:
    """The GGMLType of GGML type id `type_id`; a one-line ValueError naming it when sprig cannot read it."""
    try:
        qtype = GGMLType(type_id)
    except ValueError:
        qtype = None
    if qtype is None or not qtype.ggml:
        supported = ", ".join(t.name for t in GGMLType if t.ggml)
        raise ValueError(f"GGML tensor type {_ggml_name(type_id)} is not supported (sprig reads {supported})")
    return qtype


def _ggml_name(type_id: int) -> str:
    try:  # the gguf package knows every GGML type's name; sprig does not need it otherwise
        import gguf

        return gguf.GGMLQuantizationType(type_id).name
    except (ImportError, ValueError):
        return f"id {type_id}"


def _f16(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at bytes [start, start + 2) of each block, as float32 [n, 1]."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes [n, b] → 4-bit codes [n, 2b]: per `group` bytes, their low nibbles, then their high nibbles."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, group) >> torch.tensor([0, 4], dtype=torch.uint8, device=qs.device).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(n, -1)


def _scale_min_k4(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K's 12 packed bytes → the 8 sub-blocks' 6-bit scales and mins (uint8 [n, 8] each)."""
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return _f16(b, 0) * (_nibbles(b[:, 2:], 16).to(torch.int8) - 8).float()


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return _f16(b, 0) * _nibbles(b[:, 4:], 16).float() + _f16(b, 2)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    """fp16 d, 32 high bits (bit i: weight i), 16 bytes of low nibbles (weights 0-15 low, 16-31 high); d (q - 16)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=b.device).reshape(1, 1, 8)
    high = ((b[:, 2:6].reshape(-1, 4, 1) >> shifts) & 1).reshape(-1, 32)
    return _f16(b, 0) * ((_nibbles(b[:, 6:], 16) | (high << 4)).to(torch.int8) - 16).float()


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:].contiguous().view(torch.int8).float() * _f16(b, 0)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    d = (_f16(b, 0) * sc.float()).reshape(n, -1, 1)
    dm = (_f16(b, 2) * mn.float()).reshape(n, -1, 1)
    q = _nibbles(b[:, 16:], 32).reshape(n, -1, 32).float()
    return (d * q - dm).reshape(n, QK_K)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    d = (_f16(b, 0) * sc.float()).reshape(n, -1, 1)
    dm = (_f16(b, 2) * mn.float()).reshape(n, -1, 1)
    ql = _nibbles(b[:, 48:], 32).reshape(n, -1, 32)
    qh = b[:, 16:48].reshape(n, 1, 32) >> torch.arange(8, dtype=torch.uint8, device=b.device).reshape(1, 8, 1)
    q = (ql | ((qh & 1) << 4)).float()
    return (d * q - dm).reshape(n, QK_K)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    d = (_f16(b, 208) * scales).reshape(n, QK_K // 16, 1)
    ql = _nibbles(b[:, :128], 64).reshape(n, -1, 32)
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).reshape(1, 1, 4, 1)
    qh = b[:, 128:192].reshape(n, -1, 1, 32) >> shifts
    qh = (qh & 3).reshape(n, -1, 32)
    q = ((ql | (qh << 4)).to(torch.int8) - 32).reshape(n, QK_K // 16, -1).float()
    return (d * q).reshape(n, QK_K)


def _q4_g128(b: torch.Tensor) -> torch.Tensor:
    zero = b[:, 2:3].float()
    return _f16(b, 0) * (_nibbles(b[:, 4:], 64).float() - zero)  # q - z and d * (q - z): both exact in float32


_DEQUANTIZE = {GGMLType.Q4_0: _q4_0, GGMLType.Q4_1: _q4_1, GGMLType.Q5_0: _q5_0, GGMLType.Q8_0: _q8_0, GGMLType.Q4_K: _q4_k,
               GGMLType.Q5_K: _q5_k, GGMLType.Q6_K: _q6_k, GGMLType.Q4_G128: _q4_g128}


def dequantize(raw: torch.Tensor, qtype: GGMLType, cols: int) -> torch.Tensor:
    """Rows of GGML `qtype` data (uint8 [rows, row_bytes]) → float32 [rows, cols]."""
    rows = raw.shape[0]
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] != qtype.row_bytes(cols):
        raise ValueError(f"{qtype.name} data for {cols} columns must be uint8 [rows, {qtype.row_bytes(cols)}], got "
                         f"{str(raw.dtype).removeprefix('torch.')} {list(raw.shape)}")
    raw = raw.contiguous()
    if qtype is GGMLType.F32:
        return raw.view(torch.float32).clone()
    if qtype is GGMLType.F16:
        return raw.view(torch.float16).float()
    if qtype is GGMLType.BF16:
        return raw.view(torch.bfloat16).float()
    return _DEQUANTIZE[qtype](raw.reshape(-1, qtype.type_size)).reshape(rows, cols)


def _round_away(x: torch.Tensor) -> torch.Tensor:
    """Round half away from zero, as ggml's roundf (and `gguf.quants.np_roundf`) does."""
    a = x.abs()
    floored = a.floor()
    return x.sign() * (floored + (2 * (a - floored)).floor())


def _inverse(d: torch.Tensor) -> torch.Tensor:
    """1 / d, and 0 where d is 0."""
    return torch.where(d == 0, 0.0, torch.ones_like(d) / torch.where(d == 0, 1.0, d))


def _f16_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).view(torch.uint8)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """4-bit codes [n, 32] → 16 bytes: code i in the low nibble, code i + 16 in the high one."""
    q = q.to(torch.uint8).reshape(-1, 2, 16)
    return q[:, 0] | (q[:, 1] << 4)


def _divide(x: torch.Tensor, by: float) -> torch.Tensor:
    """x / by as a true division (torch multiplies by the reciprocal when `by` is a python number)."""
    return x / torch.full_like(x, by)


def _quantize_q8_0(blocks: torch.Tensor) -> torch.Tensor:
    d = _divide(blocks.abs().amax(dim=1, keepdim=True), 127)
    qs = _round_away(blocks * _inverse(d))
    return torch.cat([_f16_bytes(d), qs.to(torch.int8).view(torch.uint8)], dim=1)


def _quantize_q4_0(blocks: torch.Tensor) -> torch.Tensor:
    imax = blocks.abs().argmax(dim=1, keepdim=True)
    d = _divide(blocks.gather(1, imax), -8)
    qs = torch.trunc(blocks * _inverse(d) + 8.5).clamp(0, 15)
    return torch.cat([_f16_bytes(d), _pack_nibbles(qs)], dim=1)


def _quantize_q4_1(blocks: torch.Tensor) -> torch.Tensor:
    hi = blocks.amax(dim=1, keepdim=True)
    lo = blocks.amin(dim=1, keepdim=True)
    d = _divide(hi - lo, 15)
    qs = torch.trunc((blocks - lo) * _inverse(d) + 0.5).clamp(0, 15)
    return torch.cat([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles(qs)], dim=1)


_QUANTIZE = {GGMLType.Q8_0: _quantize_q8_0, GGMLType.Q4_0: _quantize_q4_0, GGMLType.Q4_1: _quantize_q4_1}


def quantize(w: torch.Tensor, qtype: GGMLType) -> torch.Tensor:
    """A float weight [rows, cols] → its GGML `qtype` rows (uint8 [rows, row_bytes]); Q8_0, Q4_0 and Q4_1 only
    (ValueError naming the type otherwise, or when cols is not a whole number of blocks)."""
    if qtype not in _QUANTIZE:
        raise ValueError(f"sprig cannot quantize to {qtype.name} (it writes {', '.join(t.name for t in QUANTIZABLE)})")
    rows, cols = w.shape
    row_bytes = qtype.row_bytes(cols)
    blocks = w.detach().float().reshape(-1, qtype.block_size)
    return _QUANTIZE[qtype](blocks).reshape(rows, row_bytes)


def pack_q4_g128(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """4-bit groups of 128 → Q4_G128 rows (uint8 [rows, cols / 128 * 68]): codes [rows, cols] (0..15), zeros
    [rows, cols / 128] (0..255) and float16 scales [rows, cols / 128], each weight scale * (code - zero)."""
    rows, cols = codes.shape
    groups = GGMLType.Q4_G128.row_bytes(cols) // GGMLType.Q4_G128.type_size
    if zeros.shape != (rows, groups) or scales.shape != (rows, groups) or scales.dtype != torch.float16:
        raise ValueError(f"Q4_G128 of [{rows}, {cols}] needs zeros and float16 scales [{rows}, {groups}], got "
                         f"{list(zeros.shape)} and {str(scales.dtype).removeprefix('torch.')} {list(scales.shape)}")
    q = codes.to(torch.uint8).reshape(rows, groups, 2, 64)
    out = torch.zeros(rows, groups, GGMLType.Q4_G128.type_size, dtype=torch.uint8)
    out[:, :, 0:2] = scales.contiguous().view(torch.uint8).view(rows, groups, 2)
    out[:, :, 2] = zeros.to(torch.uint8)
    out[:, :, 4:] = q[:, :, 0] | (q[:, :, 1] << 4)
    return out.reshape(rows, -1)
