"""Apply a grammar's token bitmask to logits in place (Triton twin of `kernels/bitmask.py`).

`bitmask` is int32 [B, ceil(V / 32)]: bit `v % 32` of word `v // 32` is set when token `v` is allowed.
Disallowed logits become -inf. One program covers a block of one row's vocabulary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 4096  # vocabulary entries per program (128 mask words)


@triton.jit
def _bitmask_kernel(logits_ptr, mask_ptr, vocab, logits_stride, mask_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = cols < vocab
    words = tl.load(mask_ptr + row * mask_stride + cols // 32, mask=valid, other=-1)
    allowed = ((words >> (cols % 32)) & 1) != 0  # arithmetic shift is fine: only the low bit is kept
    tl.store(logits_ptr + row * logits_stride + cols, float("-inf"), mask=valid & ~allowed)


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set logits [B, V] to -inf where the int32 bitmask [B, ceil(V / 32)] has the token's bit cleared."""
    batch, vocab = logits.shape
    if bitmask.shape != (batch, triton.cdiv(vocab, 32)) or bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32 [{batch}, {triton.cdiv(vocab, 32)}], got {bitmask.dtype} "
                         f"{list(bitmask.shape)}")  # fmt: skip
    assert logits.stride(-1) == 1 and bitmask.stride(-1) == 1
    if batch == 0:
        return
    grid = (batch, triton.cdiv(vocab, _BLOCK))
    _bitmask_kernel[grid](
        logits, bitmask, vocab, logits.stride(0), bitmask.stride(0), BLOCK=_BLOCK, num_warps=4
    )
