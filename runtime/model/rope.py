"""Rotary position embedding tables: inverse frequencies for each supported scaling, then cos/sin caches."""

from __future__ import annotations

import math

import torch

from sprig.runtime.model.config import RopeConfig


def _default_inv_freq(theta: float, dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _llama3_inv_freq(inv_freq: torch.Tensor, p: dict) -> torch.Tensor:
    factor, low, high = float(p["factor"]), float(p["low_freq_factor"]), float(p["high_freq_factor"])
    old_ctx = float(p["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_inv_freq(theta: float, dim: int, p: dict, max_pos: int) -> tuple[torch.Tensor, float]:
    factor = p.get("factor") or max_pos / p["original_max_position_embeddings"]
    orig = p["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn = p.get("attention_factor")
    if attn is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attn = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        else:
            attn = mscale(factor)
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attn)


def _longrope_inv_freq(theta: float, dim: int, p: dict, max_pos: int, length: int) -> tuple[torch.Tensor, float]:
    """Phi-3's LongRoPE: a divisor per frequency, `long_factor` when the served context `length` passes the
    pretraining length, else `short_factor`, and cos/sin scaled by the attention factor.

    transformers picks per forward by the sequence's current length; sprig picks once, for the context it serves,
    so every token of every request is turned by the same table (a batch, a cached prefix and a request alone
    agree). The two are equal whenever the sequence is in the served context's regime."""
    orig = p.get("original_max_position_embeddings")
    if orig is None:
        raise ValueError("longrope scaling needs original_max_position_embeddings in config.json")
    factor = p.get("factor") or max_pos / orig
    attn = p.get("attention_factor")
    if attn is None:
        attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    key = "long_factor" if length > orig else "short_factor"
    factors = torch.tensor(p.get(key) or [], dtype=torch.float32)
    if factors.shape != (dim // 2,):
        raise ValueError(f"rope {key} must hold {dim // 2} values (half the rotary dim), got {factors.numel()}")
    return 1.0 / (factors * theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), float(attn)


def rope_inv_freq(rope: RopeConfig, head_dim: int, max_pos: int, length: int | None = None
                  ) -> tuple[torch.Tensor, float]:
    """Return (inverse frequencies [head_dim // 2], scale applied to cos/sin); `length` is the served context
    (longrope picks its factors by it; None: `max_pos`)."""
    if rope.rope_type == "longrope":
        return _longrope_inv_freq(rope.theta, head_dim, rope.params, max_pos, max_pos if length is None else length)
    inv_freq = _default_inv_freq(rope.theta, head_dim)
    if rope.rope_type == "linear":
        return inv_freq / float(rope.params["factor"]), 1.0
    if rope.rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, rope.params), 1.0
    if rope.rope_type == "freq_factors":  # a divisor per frequency, as GGUF files store Llama 3's scaling
        return inv_freq / torch.tensor(rope.params["factors"], dtype=torch.float32), 1.0
    if rope.rope_type == "yarn":
        return _yarn_inv_freq(rope.theta, head_dim, rope.params, max_pos)
    return inv_freq, 1.0


def rope_cos_sin_cache(rope: RopeConfig, head_dim: int, max_pos: int, length: int) -> torch.Tensor:
    """A float32 [length, head_dim] table: cos in the first half, sin in the second (rotate-half layout).
    `head_dim` is the rotated width (`ModelConfig.rotary_dim`: less than the head with partial rotary)."""
    inv_freq, scale = rope_inv_freq(rope, head_dim, max_pos, length)
    t = torch.arange(length, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return torch.cat([freqs.cos() * scale, freqs.sin() * scale], dim=-1)
