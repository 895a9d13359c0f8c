"""The segmented LoRA product (Punica's SGMV idea), torch reference: a batch's tokens are grouped into runs that
share an adapter, and each run adds (x A^T) B^T (the scaling folded into B) to the base linear's output.

Adapters live in a pool of slots (`runtime/model/lora_pool.py`): per target module `a_t` [S, K, R] (A transposed)
and `b_t` [S, R, N] in fp32, rank R = the pool's largest, zero past an adapter's own rank. A token whose slot is -1
runs the base model alone. Sums are in fp32 and the delta is rounded once into y's dtype. The C twin is
`cpu_lora.py` (`csrc/lora.c`), the Triton twin `triton_lora.py`.
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


def lora_add_(y: torch.Tensor, x: torch.Tensor, a_t: torch.Tensor, b_t: torch.Tensor, ranks: torch.Tensor,
              batch: LoraBatch) -> None:
    """y[t] += (x[t] A_s^T) B_s^T for every token t with an adapter slot s; y [T, N] may be a column slice of a
    wider output. `ranks` [S] is each slot's rank (the reference reads the zero padding instead)."""
    del ranks  # the zeros past a slot's rank add nothing
    for start, end, slot in batch.segments:
        delta = (x[start:end].float() @ a_t[slot]) @ b_t[slot]
        rows = y[start:end]
        rows.copy_(rows.float() + delta)  # one rounding of base + delta into y's dtype
