"""Rotary position embedding in the rotate-half layout (torch reference)."""

from __future__ import annotations

import torch


def apply_rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place by their token positions [T].

    `cos_sin_cache` is float32 [max_positions, D]: cos of the D/2 frequencies, then sin. Per half:
    (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), bitwise what transformers' `x * cos + rotate_half(x) * sin`
    gives with cos/sin repeated over both halves.
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache.index_select(0, positions).unsqueeze(1).to(q.dtype)
    cos, sin = cs[..., :half], cs[..., half:]
    for x in (q, k):
        x1, x2 = x[..., :half], x[..., half:]
        r1, r2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin  # both halves read before either is overwritten
        x1.copy_(r1)
        x2.copy_(r2)
