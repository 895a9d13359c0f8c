"""Rotary position embedding in the rotate-half layout (torch reference)."""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def apply_rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place by their token positions [T].

    `cos_sin_cache` is float32 [max_positions, D]: cos of the D/2 frequencies, then sin.
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache.index_select(0, positions)
    cos = cs[:, :half].repeat(1, 2).unsqueeze(1).to(q.dtype)
    sin = cs[:, half:].repeat(1, 2).unsqueeze(1).to(q.dtype)
    q.copy_(_rotate(q, cos, sin))
    k.copy_(_rotate(k, cos, sin))
