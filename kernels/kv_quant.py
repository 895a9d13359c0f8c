"""Quantized KV cache: the storage dtypes of `--kv-cache-dtype` and their torch reference (quantize, dequantize).

Every (token, kv head) row of D keys or values is stored as D one-byte codes and one bf16 scale, symmetric:
x ≈ code * scale with scale = max|x| / QMAX, QMAX the largest code (127 for int8, 448 for fp8 e4m3, 57344 for
fp8 e5m2). Why per token and head:
- a token's codes depend on that token alone, so the same inputs store the same bytes whatever the batch, the
  chunking or the cache state (the engine's consistency invariants), and a page is never rewritten once filled;
- keys differ in size by orders of magnitude between heads and positions (rotary embedding, outlier channels):
  one scale per tensor or per page clips or wastes the code range (measured in tests/test_kv_cache_dtype.py);
- a bf16 scale costs 2 bytes per 64-wide row (3 %), so the pool still holds 1.94x the tokens of a bf16 cache.
The scale is rounded to bf16 before it divides, so the codes are computed with the very scale that is stored.
The C kernels (`csrc/kv_quant.h`) compute the same bytes (tests check it); Triton uses these functions' maths.

fp8 pools hold keys rotated by an orthonormal Hadamard matrix, and attention rotates queries alike, so q·k is
unchanged (`rotates_keys`, applied by the decoder's attention after rotary embedding; the attention kernels are
unaware of it). fp8 rounds each element relatively (2 or 3 mantissa bits), which no scale improves; what costs is that
a few outlier key channels carry most of q·k, and their rounding error with them. The rotation spreads each outlier
over the head. Measured on SmolLM2-135M (fp32, first 2,047 tokens of benchmarks/data/licenses.txt, vs fp32 KV):
e5m2 keys alone +4.2 % perplexity, values alone -0.5 % (noise), rotated keys +1.3 % (benchmarks/kv_loss.py); sprig's
e5m2 cache +3.17 % before, +1.71 % rotated, e4m3 +1.29 % before, +0.40 % rotated. Values stay unrotated.
"""

from __future__ import annotations

import enum

import torch

SCALE_DTYPE = torch.bfloat16
_MIN_AMAX = 1e-20  # an all-zero row gets a tiny normal scale (its codes stay 0) instead of 0 / 0


class KVCacheDtype(enum.Enum):
    """The `--kv-cache-dtype` choices (vLLM / SGLang names); AUTO stores K/V in the model dtype."""

    AUTO = "auto"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT8 = "int8"

    @classmethod
    def parse(cls, value: str | KVCacheDtype) -> KVCacheDtype:
        """The member named `value` (also "fp8", vLLM's alias of fp8_e4m3); ValueError naming kv_cache_dtype."""
        if isinstance(value, KVCacheDtype):
            return value
        if value == "fp8":
            return cls.FP8_E4M3
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"kv_cache_dtype must be one of {names}; got {value!r}") from None

    @property
    def quantized(self) -> bool:
        return self is not KVCacheDtype.AUTO

    def storage_dtype(self, model_dtype: torch.dtype) -> torch.dtype:
        """The element dtype of the pool's K/V tensors."""
        return model_dtype if self is KVCacheDtype.AUTO else _STORAGE[self]


_STORAGE = {
    KVCacheDtype.INT8: torch.int8,
    KVCacheDtype.FP8_E4M3: torch.float8_e4m3fn,
    KVCacheDtype.FP8_E5M2: torch.float8_e5m2,
}
QMAX = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
QUANTIZED_DTYPES = tuple(QMAX)
# The kernels' code for a cache dtype, after fp32 0, bf16 1 and fp16 2 (kernels/cpu_native.DTYPE_CODES).
KV_DTYPE_CODES = {torch.int8: 3, torch.float8_e4m3fn: 4, torch.float8_e5m2: 5}


def rotates_keys(cache_dtype: torch.dtype) -> bool:
    """Whether a pool of `cache_dtype` holds keys (and attention rotates queries) in the Hadamard basis: fp8 only
    (int8's error is relative to the row's largest element, and measured no better rotated)."""
    return cache_dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


def is_quantized(cache: torch.Tensor) -> bool:
    """True when `cache` holds quantized codes (and so comes with a scale tensor)."""
    return cache.dtype in QMAX


def quantize_kv(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] → (codes [..., D] of `dtype`, bf16 scales [...]) with x ≈ codes * scales[..., None]."""
    qmax = QMAX[dtype]
    x32 = x.float()
    scale = (x32.abs().amax(-1).clamp(min=_MIN_AMAX) / qmax).to(SCALE_DTYPE)
    y = (x32 / scale.float().unsqueeze(-1)).clamp(-qmax, qmax)  # clamp: the bf16 rounding may shrink the scale
    codes = torch.round(y).to(dtype) if dtype == torch.int8 else y.to(dtype)
    return codes, scale


def dequantize_kv(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """codes [..., D] and scales [...] → values [..., D] in `dtype`."""
    return (codes.float() * scale.float().unsqueeze(-1)).to(dtype)


def store_kv_quantized(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor,
    slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
) -> None:
    """Quantize keys/values [T, Hkv, D] into their slots [T] of the code caches and the scale caches [slots, Hkv]."""
    for cache, scales, x in ((k_cache, k_scale, k), (v_cache, v_scale, v)):
        codes, s = quantize_kv(x, cache.dtype)
        as_bytes(cache).index_copy_(0, slots, as_bytes(codes))
        scales.index_copy_(0, slots, s)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """`t` viewed as uint8 when it is fp8: torch's CPU index ops (index_copy_, index_select) have no fp8 kernels."""
    return t.view(torch.uint8) if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else t
