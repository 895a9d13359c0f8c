"""The segmented LoRA product (Punica's SGMV idea), torch reference: a batch's tokens are grouped into runs that
share an adapter, and each run adds (x A^T) B^T (the scaling folded into B) to the base linear's output.

Adapters live in a pool of slots (`runtime/model/lora_pool.py`), per linear a `LoraWeights`: the A of every target
module the linear holds (q/k/v inside a fused qkv_proj share their input x, as gate/up do), transposed side by side,
and their B, in fp32 or bf16 (summed in fp32 either way), rank R = the pool's largest, zero past an adapter's own rank, so one call adds every module's
delta to its columns of the fused output. A token whose slot is -1 runs the base model alone. Sums are in fp32 and
the delta is rounded once into y's dtype. The C twin is `cpu_lora.py` (`csrc/lora.c`), the Triton twin
`triton_lora.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LoraBatch:
    """Which adapter slot each token of a forward uses."""

    token_slots: torch.Tensor  # int64 [T]: the pool slot of each token, -1 for the base model
    segments: tuple[tuple[int, int, int], ...]  # (start, end, slot) runs of tokens with one adapter, slot >= 0

    @staticmethod
    def build(slots: Sequence[int], device: torch.device | str = "cpu") -> LoraBatch:
        """From each token's slot (-1: none)."""
        runs: list[tuple[int, int, int]] = []
        start = 0
        for t in range(1, len(slots) + 1):
            if t == len(slots) or slots[t] != slots[start]:
                if slots[start] >= 0:
                    runs.append((start, t, slots[start]))
                start = t
        return LoraBatch(torch.tensor(list(slots), dtype=torch.int64, device=device), tuple(runs))

    @property
    def empty(self) -> bool:
        return not self.segments


@dataclass(frozen=True)
class LoraWeights:
    """One linear's adapter slots: P target modules over a shared input, module p's A^T in columns [p R, p R + R)
    of `a_t` and its B in columns [bcol, bcol + width) of `b_t`, added to columns [ycol, ycol + width) of y."""

    a_t: torch.Tensor  # fp32 or bf16 [S, K, P * R]
    b_t: torch.Tensor  # the same dtype [S, R, NB]
    ranks: torch.Tensor  # int64 [S]: each slot's rank (the pool's, updated in place)
    parts: tuple[tuple[int, int, int], ...]  # per module: (ycol, width, bcol)
    table: torch.Tensor  # int64 [P, 3]: `parts` on the weights' device, for the kernels

    @staticmethod
    def zeros(num_slots: int, fan_in: int, rank: int, spans: Sequence[tuple[int, int]], ranks: torch.Tensor,
              dtype: torch.dtype = torch.float32) -> LoraWeights:
        """Empty slots for modules at `spans` (ycol, width) of y, their B side by side in that order."""
        parts, bcol = [], 0
        for ycol, width in spans:
            parts.append((ycol, width, bcol))
            bcol += width
        dev = ranks.device
        return LoraWeights(torch.zeros(num_slots, fan_in, len(parts) * rank, dtype=dtype, device=dev),
                           torch.zeros(num_slots, rank, bcol, dtype=dtype, device=dev), ranks, tuple(parts),
                           torch.tensor(parts, dtype=torch.int64, device=dev))

    @property
    def rank(self) -> int:
        return self.b_t.shape[1]

    def module(self, p: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Module p's A^T [S, K, R] and B [S, R, width] (views, for filling a slot)."""
        r, (_, width, bcol) = self.rank, self.parts[p]
        return self.a_t[:, :, p * r : (p + 1) * r], self.b_t[:, :, bcol : bcol + width]


def lora_add_(y: torch.Tensor, x: torch.Tensor, w: LoraWeights, batch: LoraBatch) -> None:
    """y[t, module p's columns] += (x[t] A_{s,p}^T) B_{s,p}^T for every token t with an adapter slot s and every
    module p of `w`; y [T, N] is the linear's whole (fused) output."""
    r = w.rank
    for start, end, slot in batch.segments:
        h = x[start:end].float() @ w.a_t[slot].float()  # every module's ranks at once: they share x
        for p, (ycol, width, bcol) in enumerate(w.parts):
            delta = h[:, p * r : (p + 1) * r] @ w.b_t[slot, :, bcol : bcol + width].float()
            rows = y[start:end, ycol : ycol + width]
            rows.copy_(rows.float() + delta)  # one rounding of base + delta into y's dtype
