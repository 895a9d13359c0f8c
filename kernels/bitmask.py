"""Token bitmasks: which token ids a grammar allows, one bit per id, applied to logits in place.

Layout (shared with xgrammar and outlines-core): an int32 tensor of shape (batch, ceil(vocab / 32)); bit j of
word w stands for token 32*w + j; a set bit means allowed. Grammar matchers fill rows on the CPU; this
function applies them on the logits' device.
"""

from __future__ import annotations

import torch

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def _shifts(device: torch.device) -> torch.Tensor:
    if device not in _SHIFTS:  # why: one tiny tensor per device, not one per call
        _SHIFTS[device] = torch.arange(32, dtype=torch.int32, device=device)
    return _SHIFTS[device]


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool tensor (batch, vocab_size): True where the token is allowed; ids past the mask are not."""
    bits = (bitmask.unsqueeze(-1) >> _shifts(bitmask.device)) & 1
    allowed = bits.reshape(bitmask.shape[0], -1).bool()
    if allowed.shape[1] >= vocab_size:
        return allowed[:, :vocab_size]
    pad = torch.zeros(bitmask.shape[0], vocab_size - allowed.shape[1], dtype=torch.bool, device=bitmask.device)
    return torch.cat([allowed, pad], dim=1)


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """Set logits[i, t] = -inf wherever token t is not allowed by bitmask row i (torch reference).

    logits: (batch, vocab) float on any device; bitmask: (batch, ceil(vocab/32)) int32 (moved to logits'
    device if needed); indices: optional rows of `logits` to mask (bitmask then has one row per index).
    """
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    mask = bitmask.to(logits.device, non_blocking=True)
    rows = logits if indices is None else logits[indices]
    if mask.shape[0] != rows.shape[0]:
        raise ValueError(f"bitmask has {mask.shape[0]} rows for {rows.shape[0]} logits rows")
    allowed = unpack_bitmask(mask, rows.shape[1])
    if indices is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        logits[indices] = rows.masked_fill(~allowed, float("-inf"))
