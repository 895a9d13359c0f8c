"""What travels between pipeline stages: point-to-point messages between equal tensor-parallel ranks of adjacent
stages, and the logits from the last stage back to rank 0.

A message down the pipeline is a header `[command, payload length, tokens]`, then for a step one body: the step's
encoded `SeqInput`s (`tp_protocol.encode_step`: token ids, prefix lengths, page tables) and the stage's hidden
states [2, tokens, hidden] (the layers' running output and residual), packed as bytes into one tensor (each message
costs a thread hand-off in gloo: two messages a step, not three). Every stage decodes the same sequences and builds
the same batch, so the page tables rank 0 allocated are valid on every stage. Sends are asynchronous (`isend`): a
stage hands its micro-batch on and takes the next one while the next stage computes. Messages between two ranks
arrive in the order they were sent (gloo and NCCL both keep it), which is all the protocol relies on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sprig.runtime.distributed.tp_protocol import Command
from sprig.runtime.model.decoder import LOGITS_DTYPE

HEADER = 3  # command, payload length, tokens


@dataclass
class LinkStats:
    """Time this rank spent in pipeline messages (the benchmark's communication time): posting sends, and receiving
    a message's payload and hidden states once its header arrived; apart, rank 0's wait for logits (which also
    covers the later stages' compute) and how many step messages this rank sent (down the pipeline, or logits)."""

    send_s: float = 0.0
    recv_s: float = 0.0
    logits_wait_s: float = 0.0
    messages: int = 0


@dataclass
class PipeLink:
    """This rank's links: `prev` / `next` are the global ranks of the same tp rank in the adjacent stages (None at
    the ends); `last_root` is the last stage's tp rank 0, which sends the logits to rank 0."""

    prev: int | None
    next: int | None
    last_root: int
    device: torch.device  # where messages live: the GPU for NCCL, the CPU for gloo
    hidden_size: int
    dtype: torch.dtype  # of the hidden states (the residual stream's, fp32); logits travel in LOGITS_DTYPE
    stats: LinkStats = field(default_factory=LinkStats)
    _pending: list[tuple[Any, list[torch.Tensor]]] = field(default_factory=list)  # sends in flight, with buffers
    _receives: list[Any] = field(default_factory=list)  # rank 0: logits receives posted and not waited for yet

    # --- down the pipeline ------------------------------------------------------------------------------------
    def send_next(self, command: Command, payload: torch.Tensor | None = None,
                  hidden: torch.Tensor | None = None) -> None:
        """Hand a command (and a step's sequences and hidden states) to the next stage without waiting for it."""
        assert self.next is not None
        t0 = time.perf_counter()
        tokens = 0 if hidden is None else int(hidden.shape[1])
        n = 0 if payload is None else payload.numel()
        parts = [torch.tensor([int(command), n, tokens], dtype=torch.int64, device=self.device)]
        body = [t.contiguous().reshape(-1).view(torch.uint8).to(self.device) for t in (payload, hidden)
                if t is not None]
        if body:
            parts.append(torch.cat(body))
        self._prune()
        # why: the buffers must outlive the asynchronous sends, so they stay in _pending until those complete
        self._pending.append(([dist.isend(t, self.next) for t in parts], parts))
        self.stats.send_s += time.perf_counter() - t0
        self.stats.messages += 1

    def receive_prev(self) -> tuple[Command, torch.Tensor | None, torch.Tensor | None]:
        """Wait for the previous stage's next message: (command, payload on the CPU, hidden states)."""
        assert self.prev is not None
        header = torch.empty(HEADER, dtype=torch.int64, device=self.device)
        dist.recv(header, self.prev)
        t0 = time.perf_counter()  # why: waiting for the header is idle time, not communication
        command, n, tokens = (int(v) for v in header.tolist())
        payload = hidden = None
        hidden_bytes = 2 * tokens * self.hidden_size * self.dtype.itemsize
        if n or tokens:
            body = torch.empty(8 * n + hidden_bytes, dtype=torch.uint8, device=self.device)
            dist.recv(body, self.prev)
            payload = body[: 8 * n].view(torch.int64).cpu() if n else None
            if tokens:
                hidden = body[8 * n :].view(self.dtype).reshape(2, tokens, self.hidden_size)
        self.stats.recv_s += time.perf_counter() - t0
        return Command(command), payload, hidden

    # --- logits back to rank 0 ----------------------------------------------------------------------------------
    def send_logits(self, logits: torch.Tensor) -> None:
        """The last stage's tp rank 0: send a step's logits [rows, vocab] to rank 0."""
        t0 = time.perf_counter()
        buf = logits.contiguous().to(self.device)
        self._prune()
        self._pending.append(([dist.isend(buf, 0)], [buf]))
        self.stats.send_s += time.perf_counter() - t0
        self.stats.messages += 1

    def post_logits(self, rows: int, vocab: int) -> tuple[torch.Tensor, Any]:
        """Rank 0: post the receive of a step's logits (before sending the step, so the answer always has a
        receiver); returns the buffer and the pending receive to `wait_logits` on."""
        buf = torch.empty(rows, vocab, dtype=LOGITS_DTYPE, device=self.device)
        work = dist.irecv(buf, self.last_root)
        self._receives.append(work)
        return buf, work

    def wait_logits(self, work: Any) -> None:
        t0 = time.perf_counter()
        work.wait()
        self._receives.remove(work)
        self.stats.logits_wait_s += time.perf_counter() - t0

    # --- housekeeping -------------------------------------------------------------------------------------------
    def _prune(self) -> None:
        self._pending = [(works, bufs) for works, bufs in self._pending if not all(w.is_completed() for w in works)]

    def drain(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s` each) for this rank's messages still in flight (before leaving the group): the
        logits of steps nobody collected any more, then the sends."""
        for work in [*self._receives, *(w for works, _ in self._pending for w in works)]:
            work.wait(timedelta(seconds=timeout_s))
        self._receives.clear()
        self._pending.clear()
