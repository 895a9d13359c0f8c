"""Turns a list of sequences to advance into one ForwardBatch and runs the model over the KV pool."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sprig.kernels.attention import AttentionMetadata
from sprig.runtime.cuda_graph import DEFAULT_BATCH_SIZES, DecodeGraphRunner
from sprig.runtime.kv_pool import KVPool
from sprig.runtime.model import CausalLM, ForwardBatch


@dataclass(frozen=True)
class SeqInput:
    """One sequence in a step: `token_ids` are new, `prefix_len` tokens already sit in the pool."""

    token_ids: Sequence[int]
    prefix_len: int
    pages: Sequence[int]  # page table covering prefix_len + len(token_ids) tokens
    all_logits: bool = False  # logits for every new token (prompt logprobs), not just the last


@dataclass(frozen=True)
class StepOutput:
    logits: torch.Tensor  # float32 [R, vocab]
    row_start: list[int]  # first logits row of each sequence
    row_count: list[int]  # 1, or len(token_ids) when all_logits

    def last(self, i: int) -> torch.Tensor:
        """Next-token logits after sequence i's last new token."""
        return self.logits[self.row_start[i] + self.row_count[i] - 1]


class ModelRunner:
    """Owns the model and the pool tensors; one `forward` per engine step."""

    def __init__(self, model: CausalLM, pool: KVPool) -> None:
        self.model = model
        self.pool = pool
        self.device = model.embed_tokens.weight.device
        self.graph_runner: DecodeGraphRunner | None = None

    def enable_decode_graphs(self, max_context: int, max_batch: int, use_graphs: bool) -> None:
        """Run decode-only steps from static buffers (CUDA graphs when `use_graphs`)."""
        sizes = [b for b in DEFAULT_BATCH_SIZES if b < max_batch] + [max_batch]
        self.graph_runner = DecodeGraphRunner(self.model, self.pool, max_context, sizes, use_graphs)

    def build_batch(self, seqs: Sequence[SeqInput]) -> tuple[ForwardBatch, list[int], list[int]]:
        page_size = self.pool.page_size
        ids: list[int] = []
        positions: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        logits_rows: list[torch.Tensor] = []
        row_start: list[int] = []
        row_count: list[int] = []
        page_tables: list[torch.Tensor] = []
        t = 0
        r = 0
        for seq in seqs:
            n = len(seq.token_ids)
            if n == 0:
                raise ValueError("a sequence in a step must add at least one token")
            ids.extend(seq.token_ids)
            pos = torch.arange(seq.prefix_len, seq.prefix_len + n)
            table = torch.as_tensor(seq.pages, dtype=torch.int64)
            page_tables.append(table)
            positions.append(pos)
            slots.append(table[pos // page_size] * page_size + pos % page_size)
            count = n if seq.all_logits else 1
            logits_rows.append(torch.arange(t + n - count, t + n))
            row_start.append(r)
            row_count.append(count)
            t += n
            r += count
        attn = AttentionMetadata.build(
            page_size, [len(s.token_ids) for s in seqs], [s.prefix_len for s in seqs], page_tables
        )
        batch = ForwardBatch(
            input_ids=torch.tensor(ids, dtype=torch.int64, device=self.device),
            positions=torch.cat(positions).to(self.device),
            out_slots=torch.cat(slots).to(self.device),
            attn=attn.to(self.device),
            logits_rows=torch.cat(logits_rows).to(self.device),
        )
        return batch, row_start, row_count

    def forward(self, seqs: Sequence[SeqInput]) -> StepOutput:
        if self.graph_runner is not None and self.graph_runner.can_run(seqs):
            n = len(seqs)
            return StepOutput(self.graph_runner.run(seqs), list(range(n)), [1] * n)
        batch, row_start, row_count = self.build_batch(seqs)
        logits = self.model(batch, self.pool.k_caches, self.pool.v_caches)
        return StepOutput(logits, row_start, row_count)
