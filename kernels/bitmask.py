"""Token bitmasks: which token ids a grammar allows, one bit per id, applied to logits in place.

Layout (shared with xgrammar and outlines-core): an int32 tensor of shape (batch, ceil(vocab / 32)); bit j of
word w stands for token 32*w + j; a set bit means allowed. Grammar matchers fill rows on the CPU; this
function applies them on the logits' device.

The reference below reads the mask a byte at a time through a 256 x 8 table of additive biases (0 or
-inf), gathered with `embedding`, then adds the bias to the logits: on CPU this is ~10x faster than
unpacking bits and `masked_fill_` (which is slow on large CPU tensors).
"""

from __future__ import annotations

import torch

_TABLES: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _bias_table(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    key = (device, dtype)
    if key not in _TABLES:  # why: one 256 x 8 table per device and dtype, not one per call
        bits = ((torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1).bool()
        _TABLES[key] = torch.where(bits, 0.0, float("-inf")).to(device=device, dtype=dtype)
    return _TABLES[key]


def _bias(bitmask: torch.Tensor, vocab_size: int, dtype: torch.dtype) -> torch.Tensor:
    """(batch, vocab_size) additive bias: 0 where allowed, -inf elsewhere (ids past the mask: -inf)."""
    as_bytes = bitmask.contiguous().view(torch.uint8).long()  # little-endian: byte k holds ids 8k..8k+7
    bias = torch.nn.functional.embedding(as_bytes, _bias_table(bitmask.device, dtype))
    bias = bias.reshape(bitmask.shape[0], -1)
    if bias.shape[1] >= vocab_size:
        return bias[:, :vocab_size]
    pad = torch.full((bitmask.shape[0], vocab_size - bias.shape[1]), float("-inf"), dtype=dtype,
                     device=bitmask.device)
    return torch.cat([bias, pad], dim=1)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool tensor (batch, vocab_size): True where the token is allowed; ids past the mask are not."""
    return _bias(bitmask, vocab_size, torch.float32) == 0


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """Set logits[i, t] = -inf wherever token t is not allowed by bitmask row i (torch reference).

    logits: (batch, vocab) float on any device; bitmask: (batch, ceil(vocab/32)) int32 (moved to logits'
    device if needed); indices: optional rows of `logits` to mask (bitmask then has one row per index).
    Allowed logits are unchanged (they get + 0.0, which only turns -0.0 into 0.0).
    """
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    mask = bitmask.to(logits.device, non_blocking=True)
    rows = logits.shape[0] if indices is None else indices.shape[0]
    if mask.shape[0] != rows:
        raise ValueError(f"bitmask has {mask.shape[0]} rows for {rows} logits rows")
    bias = _bias(mask, logits.shape[1], logits.dtype)
    if indices is None:
        logits.add_(bias)
    else:
        logits.index_add_(0, indices.to(logits.device), bias)


def mask_logits_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """For sampling: -inf wherever bitmask row i clears token t (ids past the mask too) and wherever a logit is
    NaN, in place on fp32 `logits` [B, V]; returns a bool [B]: the rows left with no logit above -inf.

    On the CPU, sprig's C kernel (`csrc/bitmask.c`) does it in one pass; elsewhere, or with the C kernels off,
    the torch reference above and two more passes.
    """
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.shape[0] != logits.shape[0]:
        raise ValueError(f"bitmask must be int32 [{logits.shape[0]}, words], got {bitmask.dtype} {list(bitmask.shape)}")
    from sprig.kernels.cpu_native import native_kernels  # why: not at import; Triton-only users never build C

    lib = native_kernels() if logits.device.type == "cpu" and bitmask.device.type == "cpu" else None
    if lib is not None and logits.dtype == torch.float32 and logits.stride(1) == 1 and bitmask.stride(1) == 1:
        dead = torch.empty(logits.shape[0], dtype=torch.uint8)
        lib.apply_token_bitmask(logits.data_ptr(), logits.shape[0], logits.shape[1], logits.stride(0),
                                bitmask.data_ptr(), bitmask.shape[1], bitmask.stride(0), dead.data_ptr(),
                                torch.get_num_threads())
        return dead.bool()
    apply_token_bitmask_(logits, bitmask)
    # why: an infinite logit under a cleared bit gives inf + -inf = NaN; neginf keeps -inf (not -FLT_MAX)
    logits.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    return logits.amax(dim=-1) == float("-inf")
