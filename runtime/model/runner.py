"""One engine step's forward: the sequences to advance become one flat `ForwardBatch` over the KV pool, or, for a
decode-only step, static buffers replayed from a graph. `ModelRunner` picks which, per step.

`DecodeGraphRunner`: a decode step is the same kernels with the same shapes every time once the batch is padded to one of a few
sizes and page tables are padded to the longest context, so it can be captured once per size and replayed
with no Python or launch overhead. Padding rows write their K/V into a scratch page that no request owns.
On CUDA the graphs are CUDA graphs, all captured at start-up. On the CPU they are `cpu_graph.CpuGraph`s (the
forward's C-kernel calls), each captured by the first step of its size, which is itself a real step; a size whose
forward cannot be captured runs eagerly from the same buffers. With `use_graphs=False` the static-buffer path
runs eagerly.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sprig.kernels.attention import AttentionMetadata
from sprig.kernels.lora import LoraBatch
from sprig.runtime.model.cpu_graph import CpuGraph, GraphCaptureError, capture
from sprig.runtime.model.decoder import CausalLM, ForwardBatch, SlidingInputs
from sprig.runtime.model.kv_pool import KVPool

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256)  # decode graphs captured


@dataclass(frozen=True)
class SeqInput:
    """One sequence in a step: `token_ids` are new, `prefix_len` tokens already sit in the pool."""

    token_ids: Sequence[int]
    prefix_len: int
    pages: Sequence[int]  # page table covering prefix_len + len(token_ids) tokens
    all_logits: bool = False  # logits for every new token (prompt logprobs), not just the last
    # The sliding region's page table (`kv_pool.py`), taken when the step was made: the overlap schedule plans the
    # next step, which may release sliding pages, while this one builds its batch. None: mapped from `pages` now.
    sliding_pages: np.ndarray | None = None
    lora_slot: int = -1  # the adapter pool slot its tokens use (-1: the base model)


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
        lora_slots: list[int] = []
        t = 0
        for seq in seqs:
            n = len(seq.token_ids)
            if n == 0:
                raise ValueError("a sequence in a step must add at least one token")
            ids.extend(seq.token_ids)
            lora_slots.extend([seq.lora_slot] * n)
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
            sliding=self._sliding_inputs(seqs, slots, page_tables),
            lora=LoraBatch.build(lora_slots, dev) if any(s.lora_slot >= 0 for s in seqs) else None,
        )
        return batch, row_start, row_count

    def _sliding_inputs(self, seqs: Sequence[SeqInput], slots: list[int], tables: list[torch.Tensor]
                        ) -> SlidingInputs | None:
        """The batch's slots and page tables in the pool's sliding region, when it has one."""
        if self.pool.sliding is None:
            return None
        p = self.page_size
        mapped = [self.pool.sliding_table(seq.pages, seq.sliding_pages) for seq in seqs]
        out_slots = np.concatenate([
            table[span // p] * p + span % p
            for seq, table in zip(seqs, mapped, strict=True)
            for span in [np.arange(seq.prefix_len, seq.prefix_len + len(seq.token_ids))]])
        attn = AttentionMetadata.build(p, [len(s.token_ids) for s in seqs], [s.prefix_len for s in seqs],
                                       [torch.from_numpy(t) for t in mapped],
                                       split_shared_prefixes=False)  # why: windowed layers never read the groups
        return SlidingInputs(torch.from_numpy(out_slots).to(self.device), attn.to(self.device))

    @property
    def page_size(self) -> int:
        return self.pool.page_size

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


# --- decode steps from static buffers and graphs ------------------------------------------------------------

class DecodeGraphRunner:
    """Runs decode-only steps of up to `max(batch_sizes)` sequences from static buffers."""

    def __init__(self, model: CausalLM, pool: KVPool, max_context: int, batch_sizes: Sequence[int],
                 use_graphs: bool) -> None:
        self.model = model
        self.pool = pool
        self.device = model.device
        self.page_size = pool.page_size
        self.max_pages = -(-max_context // pool.page_size)
        self.batch_sizes = sorted(set(batch_sizes))
        self.scratch_slot = pool.scratch_page * pool.page_size
        b, dev = self.batch_sizes[-1], self.device
        self.input_ids = torch.zeros(b, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(b, dtype=torch.int64, device=dev)
        self.out_slots = torch.full((b,), self.scratch_slot, dtype=torch.int64, device=dev)
        self.pages = torch.full((b, self.max_pages), pool.scratch_page, dtype=torch.int64, device=dev)
        self.mask = torch.zeros(b, 1, 1, self.max_pages * pool.page_size, dtype=torch.bool, device=dev)
        self.lens = torch.ones(b, dtype=torch.int64, device=dev)
        self.rows = torch.arange(b, device=dev)
        # The sliding region's page tables and slots of the same rows (`kv_pool.py`), when the pool has one.
        self.sliding = pool.sliding
        self.sliding_pages: torch.Tensor | None = None
        self.sliding_slots: torch.Tensor | None = None
        if self.sliding is not None:
            scratch = self.sliding.scratch_page
            self.sliding_pages = torch.full_like(self.pages, scratch)
            self.sliding_slots = torch.full_like(self.out_slots, scratch * pool.page_size)
        # Each row's adapter slot (-1: none), bound on every step when the model has an adapter pool, so a graph
        # captured without adapters still replays their products.
        self.lora_slots = torch.full((b,), -1, dtype=torch.int64, device=dev) if model.lora_pool is not None \
            else None
        self.lora_segments: tuple[tuple[int, int, int], ...] = ()
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.cpu_graphs: dict[int, CpuGraph] = {}
        self.on_cpu = self.device.type == "cpu"
        self.use_graphs = use_graphs
        self.capture_error: str | None = None  # why CPU graphs are off (the first capture that failed)
        if use_graphs and not self.on_cpu:
            self.capture_all()

    # --- eligibility ---------------------------------------------------------------------------------
    def can_run(self, seqs: Sequence) -> bool:
        """Decode-only steps that fit the buffers (one token each, no prompt logprobs)."""
        if not seqs or len(seqs) > self.batch_sizes[-1]:
            return False
        return all(len(s.token_ids) == 1 and not s.all_logits and s.prefix_len < self.max_pages * self.page_size
                   for s in seqs)

    def bucket(self, n: int) -> int:
        return self.batch_sizes[bisect.bisect_left(self.batch_sizes, n)]

    # --- static batch --------------------------------------------------------------------------------
    def _batch(self, b: int) -> ForwardBatch:
        meta = AttentionMetadata(self.page_size, self.rows[:b], self.pages[:b], self.mask[:b], (),
                                 decode_lens=self.lens[:b])
        sliding = None
        if self.sliding_pages is not None and self.sliding_slots is not None:
            sliding = SlidingInputs(self.sliding_slots[:b], AttentionMetadata(
                self.page_size, self.rows[:b], self.sliding_pages[:b], self.mask[:b], (), decode_lens=self.lens[:b]))
        lora = None if self.lora_slots is None else LoraBatch(self.lora_slots[:b], self.lora_segments)
        return ForwardBatch(self.input_ids[:b], self.positions[:b], self.out_slots[:b], meta, None, sliding, lora)

    def _fill(self, seqs: Sequence, b: int, with_mask: bool = True) -> None:
        """Copy this step's inputs into the static buffers; rows past len(seqs) become harmless padding. The mask
        (read only by the torch attention path) is skipped when `with_mask` is False. Built in numpy: a torch op
        per sequence cost 0.4 ms per batch-16 step."""
        p = self.page_size
        pages = np.full((b, self.max_pages), self.pool.scratch_page, dtype=np.int64)
        ids = np.zeros(b, dtype=np.int64)
        pos = np.zeros(b, dtype=np.int64)
        slots = np.full(b, self.scratch_slot, dtype=np.int64)
        lens = np.ones(b, dtype=np.int64)  # a padding row attends its scratch key: no empty softmax
        for i, s in enumerate(seqs):
            pages[i, : len(s.pages)] = s.pages
            ids[i] = s.token_ids[0]
            pos[i] = s.prefix_len
            slots[i] = s.pages[s.prefix_len // p] * p + s.prefix_len % p
        lens[: len(seqs)] = pos[: len(seqs)] + 1
        nb = self.device.type == "cuda"
        fills = [(self.input_ids, ids), (self.positions, pos), (self.out_slots, slots), (self.pages, pages),
                 (self.lens, lens)]
        if self.sliding is not None and self.sliding_pages is not None and self.sliding_slots is not None:
            spages = np.full((b, self.max_pages), self.sliding.scratch_page, dtype=np.int64)
            sslots = np.full(b, self.sliding.scratch_page * p, dtype=np.int64)
            for i, s in enumerate(seqs):
                table = self.pool.sliding_table(s.pages, s.sliding_pages)
                spages[i, : len(table)] = table
                sslots[i] = table[s.prefix_len // p] * p + s.prefix_len % p
            fills += [(self.sliding_pages, spages), (self.sliding_slots, sslots)]
        if self.lora_slots is not None:
            slots_of = [s.lora_slot for s in seqs] + [-1] * (b - len(seqs))
            self.lora_segments = LoraBatch.build(slots_of).segments
            self.lora_slots[:b].copy_(torch.tensor(slots_of, dtype=torch.int64), non_blocking=nb)
        for buf, values in fills:
            buf[:b].copy_(torch.from_numpy(values), non_blocking=nb)
        if with_mask:
            mask = torch.arange(self.max_pages * p).unsqueeze(0) < torch.from_numpy(lens).unsqueeze(1)
            self.mask[:b].copy_(mask[:, None, None, :], non_blocking=nb)

    # --- capture and replay --------------------------------------------------------------------------
    def capture_all(self) -> None:
        """Capture one graph per batch size, largest first so smaller ones reuse its memory pool."""
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        for b in reversed(self.batch_sizes):
            batch = self._batch(b)
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up: lazy inits and autotuning happen outside the capture
                    self.model(batch, self.pool.k_caches, self.pool.v_caches, self.pool.k_scales, self.pool.v_scales)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                self.outputs[b] = self.model(batch, self.pool.k_caches, self.pool.v_caches, self.pool.k_scales, self.pool.v_scales)
            self.graphs[b] = graph
        torch.cuda.synchronize()
        logger.info("captured decode CUDA graphs for batch sizes %s", self.batch_sizes)

    def _forward(self, b: int) -> torch.Tensor:
        return self.model(self._batch(b), self.pool.k_caches, self.pool.v_caches, self.pool.k_scales,
                          self.pool.v_scales)

    def _cpu_graph_step(self, b: int) -> torch.Tensor:
        """Replay size b's CPU graph, capturing it on its first step (a real step: its logits are used). The
        first capture that fails turns CPU graphs off: what stopped it (an op in torch) is the same at any size."""
        graph = self.cpu_graphs.get(b)
        if graph is not None:
            graph.replay()
            return self.outputs[b]
        if self.capture_error is not None:
            return self._forward(b)
        try:
            self.outputs[b], self.cpu_graphs[b] = capture(lambda: self._forward(b))
        except GraphCaptureError as e:
            self.capture_error = str(e)
            logger.warning("CPU decode graphs are off, decode steps run eagerly: %s", e)
            return self._forward(b)  # the failed capture may have stopped halfway: this step runs again
        return self.outputs[b]

    def run(self, seqs: Sequence) -> torch.Tensor:
        """Next-token logits [len(seqs), vocab] for a decode-only step."""
        b = self.bucket(len(seqs))
        # A captured CPU graph's C kernels read the lengths, never the mask.
        self._fill(seqs, b, with_mask=b not in self.cpu_graphs)
        if b in self.graphs:
            self.graphs[b].replay()
            return self.outputs[b][: len(seqs)]
        if self.use_graphs and self.on_cpu:
            return self._cpu_graph_step(b)[: len(seqs)]
        return self._forward(b)[: len(seqs)]
