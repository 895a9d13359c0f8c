"""What rank 0 tells the other tensor-parallel ranks each step, as two int64 broadcasts.

A message is a header `[command, payload length]` and, for a step, a payload that lists each sequence as
`[new tokens, prefix length, pages, all_logits, LoRA slot, token ids..., page ids...]` after the sequence count. Every rank
decodes the same `SeqInput`s rank 0 scheduled and builds the same `ForwardBatch` from them, so only token ids and
page tables travel, never tensors of the model's width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import torch
import torch.distributed as dist

from sprig.runtime.model.parallel import TPContext
from sprig.runtime.model.runner import SeqInput

SEQ_FIELDS = 5  # new tokens, prefix length, pages, all_logits, LoRA slot


class Command(IntEnum):
    """What the other ranks do next."""

    STEP = 1  # run one forward over the decoded batch
    HEARTBEAT = 2  # nothing: keeps idle ranks inside their collective timeout
    SHUTDOWN = 3  # leave the loop and exit cleanly


def encode_step(seqs: Sequence[SeqInput]) -> torch.Tensor:
    """Flatten a step's sequences into one int64 tensor."""
    flat: list[int] = [len(seqs)]
    for s in seqs:
        flat += [len(s.token_ids), s.prefix_len, len(s.pages), int(s.all_logits), s.lora_slot]
        flat += s.token_ids
        flat += s.pages
    return torch.tensor(flat, dtype=torch.int64)


def decode_step(payload: torch.Tensor) -> list[SeqInput]:
    """The inverse of `encode_step`."""
    flat = payload.tolist()
    seqs: list[SeqInput] = []
    pos = 1
    for _ in range(flat[0]):
        n, prefix, n_pages, all_logits, lora_slot = flat[pos : pos + SEQ_FIELDS]
        pos += SEQ_FIELDS
        ids = flat[pos : pos + n]
        pages = flat[pos + n : pos + n + n_pages]
        pos += n + n_pages
        seqs.append(SeqInput(ids, prefix, pages, all_logits=bool(all_logits), lora_slot=lora_slot))
    return seqs


@dataclass(frozen=True)
class StepChannel:
    """Broadcasts from rank 0 on the collective device (the GPU for NCCL, the CPU for gloo)."""

    tp: TPContext
    device: torch.device

    def send(self, command: Command, payload: torch.Tensor | None = None) -> None:
        """Rank 0: announce a command (and its payload) to every other rank."""
        n = 0 if payload is None else payload.numel()
        header = torch.tensor([int(command), n], dtype=torch.int64, device=self.device)
        dist.broadcast(header, src=self._src(), group=self.tp.group)
        if payload is not None:
            dist.broadcast(payload.to(self.device), src=self._src(), group=self.tp.group)

    def receive(self) -> tuple[Command, torch.Tensor | None]:
        """Other ranks: wait for rank 0's next command."""
        header = torch.empty(2, dtype=torch.int64, device=self.device)
        dist.broadcast(header, src=self._src(), group=self.tp.group)
        command, n = (int(v) for v in header.tolist())
        if n == 0:
            return Command(command), None
        payload = torch.empty(n, dtype=torch.int64, device=self.device)
        dist.broadcast(payload, src=self._src(), group=self.tp.group)
        return Command(command), payload.cpu()

    def _src(self) -> int:
        return 0 if self.tp.group is None else dist.get_global_rank(self.tp.group, 0)
