"""An orthonormal Hadamard rotation of each head's vector, in place (torch reference).

Why: an fp8 KV cache rounds every key element to 3 (e4m3) or 2 (e5m2) mantissa bits, a relative error whatever the
scale. A few outlier channels carry most of q·k, so their rounding dominates the score error; rotating q and k by
the same orthonormal matrix H leaves q·k unchanged (q H · k H = q·k) and spreads each outlier over every channel
(see `kv_quant.rotates_keys`). The fast Walsh–Hadamard transform runs in blocks of the largest power of two that
divides the head size (the whole head for 64 or 128), in float32, rounded once to the input dtype; the C kernel
(`csrc/cpu_elementwise.c`, `hadamard_rotate`) adds and subtracts in the same order, so both give the same bits.
"""

from __future__ import annotations

import math

import torch


def hadamard_block(head_dim: int) -> int:
    """The size of the Hadamard blocks a head of `head_dim` is rotated in: the largest power of two dividing it."""
    return head_dim & -head_dim


def hadamard_rotate_(x: torch.Tensor) -> None:
    """Rotate every row x[..., :] (e.g. [T, H, D], a strided view allowed) by the orthonormal Hadamard matrix."""
    d = x.shape[-1]
    block = hadamard_block(d)
    y = x.float().reshape(-1, d // block, block)
    h = 1
    while h < block:  # butterfly stage: pairs (j, j + h) in each run of 2h
        y = y.reshape(*y.shape[:2], block // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2)
        h *= 2
    scale = torch.tensor(1 / math.sqrt(block), dtype=torch.float32)
    x.copy_((y.reshape(x.shape) * scale).to(x.dtype))
