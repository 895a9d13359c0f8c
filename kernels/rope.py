"""Rotary position embedding in the rotate-half layout (torch reference)."""

from __future__ import annotations

import torch


def apply_rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place by their token positions [T].

    `cos_sin_cache` is float32 [max_positions, D]: cos of the D/2 frequencies, then sin. Per half:
    (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), computed in float32 (cos/sin unrounded, each product and sum
    rounded to float32) and rounded once to q's dtype. transformers rounds cos/sin and every product to bf16;
    one rounding keeps bf16 closer to fp32, and fp32 is unchanged.
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache.index_select(0, positions).unsqueeze(1).float()
    cos, sin = cs[..., :half], cs[..., half:]
    for x in (q, k):
        x1, x2 = x[..., :half], x[..., half:]
        a, b = x1.float(), x2.float()
        r1, r2 = a * cos - b * sin, b * cos + a * sin  # both halves read before either is overwritten
        x1.copy_(r1)
        x2.copy_(r2)
