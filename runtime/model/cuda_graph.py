"""Decode steps replayed from graphs: static input buffers, batch sizes padded to a captured size.

A decode step is the same kernels with the same shapes every time once the batch is padded to one of a few
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

import numpy as np
import torch

from sprig.kernels.attention import AttentionMetadata
from sprig.runtime.model.cpu_graph import CpuGraph, GraphCaptureError, capture
from sprig.runtime.model.decoder import CausalLM, ForwardBatch
from sprig.runtime.model.kv_pool import KVPool

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256)


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
        return ForwardBatch(self.input_ids[:b], self.positions[:b], self.out_slots[:b], meta, None)

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
        for buf, values in ((self.input_ids, ids), (self.positions, pos), (self.out_slots, slots),
                            (self.pages, pages), (self.lens, lens)):
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
