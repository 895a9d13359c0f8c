"""Turns a list of sequences to advance into one ForwardBatch and runs the model over the KV pool."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sprig.kernels.attention import AttentionMetadata
from sprig.runtime.model.cuda_graph import DEFAULT_BATCH_SIZES, DecodeGraphRunner
from sprig.runtime.model.decoder import CausalLM, ForwardBatch
from sprig.runtime.model.kv_pool import KVPool


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

    def last_rows(self, seq_indices: list[int]) -> torch.Tensor:
        """`last(i)` stacked for each i; the logits themselves (no copy) when that is every row in order."""
        rows = [self.row_start[i] + self.row_count[i] - 1 for i in seq_indices]
        if rows == list(range(self.logits.shape[0])):
            return self.logits
        return self.logits.index_select(0, torch.tensor(rows, device=self.logits.device))


@dataclass(frozen=True)
class StepHandle:
    """A launched step: its output when the runner computed it at once, else what a pipelined runner waits on."""

    output: StepOutput | None = None
    pending: Any = None


class ModelRunner:
    """Owns the model and the pool tensors; one `forward` per engine step.

    `launch` / `collect` split a step for runners that keep several in flight (pipeline parallelism); here
    `launch` just runs the forward."""

    def __init__(self, model: CausalLM, pool: KVPool) -> None:
        self.model = model
        self.pool = pool
        self.device = model.device
        self.graph_runner: DecodeGraphRunner | None = None

    def enable_decode_graphs(self, max_context: int, max_batch: int, use_graphs: bool) -> None:
        """Run decode-only steps from static buffers (CUDA graphs when `use_graphs`)."""
        sizes = [b for b in DEFAULT_BATCH_SIZES if b < max_batch] + [max_batch]
        self.graph_runner = DecodeGraphRunner(self.model, self.pool, max_context, sizes, use_graphs)

    def build_batch(self, seqs: Sequence[SeqInput]) -> tuple[ForwardBatch, list[int], list[int]]:
        page_size = self.pool.page_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logits_rows: list[int] = []
        row_start: list[int] = []
        row_count: list[int] = []
        page_tables: list[torch.Tensor] = []
        t = 0
        for seq in seqs:
            n = len(seq.token_ids)
            if n == 0:
                raise ValueError("a sequence in a step must add at least one token")
            ids.extend(seq.token_ids)
            pages = seq.pages
            span = range(seq.prefix_len, seq.prefix_len + n)
            positions.extend(span)
            slots.extend(pages[p // page_size] * page_size + p % page_size for p in span)
            page_tables.append(torch.as_tensor(pages, dtype=torch.int64))
            count = n if seq.all_logits else 1
            row_start.append(len(logits_rows))
            row_count.append(count)
            logits_rows.extend(range(t + n - count, t + n))
            t += n
        attn = AttentionMetadata.build(
            page_size, [len(s.token_ids) for s in seqs], [s.prefix_len for s in seqs], page_tables,
            split_shared_prefixes=self.model.ops.uses_decode_split,
        )
        dev = self.device
        batch = ForwardBatch(
            input_ids=torch.tensor(ids, dtype=torch.int64, device=dev),
            positions=torch.tensor(positions, dtype=torch.int64, device=dev),
            out_slots=torch.tensor(slots, dtype=torch.int64, device=dev),
            attn=attn.to(dev),
            # Ascending rows, so as many as there are tokens is every row: no gather (every row of a decode step)
            logits_rows=None if len(logits_rows) == t else torch.tensor(logits_rows, dtype=torch.int64, device=dev),
        )
        return batch, row_start, row_count

    def launch(self, seqs: Sequence[SeqInput]) -> StepHandle:
        """Start a step; `collect` returns its output."""
        return StepHandle(self.forward(seqs))

    def collect(self, handle: StepHandle) -> StepOutput:
        assert handle.output is not None  # launched by this runner
        return handle.output

    def run_stage(self, seqs: Sequence[SeqInput], hidden: torch.Tensor | None) -> torch.Tensor:
        """A pipeline stage's share of a step: its hidden states [2, T, hidden] for the next stage, or on the last
        stage the logits. Every stage builds the same batch from the same sequences."""
        batch, _, _ = self.build_batch(seqs)
        return self.model(batch, self.pool.k_caches, self.pool.v_caches, self.pool.k_scales, self.pool.v_scales,
                          hidden=hidden)

    def forward(self, seqs: Sequence[SeqInput]) -> StepOutput:
        if self.graph_runner is not None and self.graph_runner.can_run(seqs):
            n = len(seqs)
            return StepOutput(self.graph_runner.run(seqs), list(range(n)), [1] * n)
        batch, row_start, row_count = self.build_batch(seqs)
        logits = self.model(batch, self.pool.k_caches, self.pool.v_caches, self.pool.k_scales, self.pool.v_scales)
        return StepOutput(logits, row_start, row_count)
