"""Rank 0's runner with pipeline stages: `launch` runs stage 0 of a step and hands it down the pipeline without
waiting; `collect` waits for that step's logits from the last stage. The engine keeps up to `pp_size` steps in
flight on disjoint requests (`engine/pipeline.py`), so every stage has a micro-batch to work on.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from sprig.runtime.distributed.errors import ParallelError, PipelineParallelError
from sprig.runtime.distributed.pp_protocol import PipeLink
from sprig.runtime.distributed.tp_protocol import Command, encode_step
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.kv_pool import KVPool
from sprig.runtime.model.runner import ModelRunner, SeqInput, StepHandle, StepOutput


class StageGroup(Protocol):
    """What the runner needs of rank 0's group (`tp_group.TPGroup`): its lock and link, sending, failing."""

    lock: threading.Lock
    link: PipeLink | None

    def send(self, command: Command, payload: torch.Tensor | None = None) -> None: ...
    def touch(self) -> None: ...
    def raise_if_failed(self) -> None: ...
    def wait_for_cause(self, timeout: float) -> str | None: ...
    def fail(self, message: str) -> None: ...


@dataclass(frozen=True)
class _InFlight:
    """A launched step: where its logits arrive, the pending receive, and each sequence's logits rows."""

    logits: torch.Tensor
    work: Any
    row_start: list[int]
    row_count: list[int]


class PipelineRunner(ModelRunner):
    """Stage 0 on rank 0: broadcast the step to the stage's tensor-parallel peers, run the stage's layers, send the
    sequences and hidden states to stage 1, and receive the logits when the step is collected."""

    def __init__(self, model: CausalLM, pool: KVPool, group: StageGroup) -> None:
        super().__init__(model, pool)
        self.group = group
        assert group.link is not None  # a pipeline group has its link once started
        self.link = group.link

    def forward(self, seqs: Sequence[SeqInput]) -> StepOutput:
        return self.collect(self.launch(seqs))

    def launch(self, seqs: Sequence[SeqInput]) -> StepHandle:
        with self.group.lock, self._failures():
            payload = encode_step(seqs)
            self.group.send(Command.STEP, payload)
            batch, row_start, row_count = self.build_batch(seqs)
            hidden = self.model(batch, self.pool.k_caches, self.pool.v_caches, self.pool.k_scales,
                                self.pool.v_scales)
            logits, work = self.link.post_logits(sum(row_count), self.model.cfg.vocab_size)
            self.link.send_next(Command.STEP, payload, hidden)
            self.group.touch()
        return StepHandle(pending=_InFlight(logits, work, row_start, row_count))

    def collect(self, handle: StepHandle) -> StepOutput:
        if handle.output is not None:
            return handle.output
        step = handle.pending
        assert isinstance(step, _InFlight)  # launched by this runner
        with self._failures():
            self.link.wait_logits(step.work)
        return StepOutput(step.logits, step.row_start, step.row_count)

    def _failures(self) -> _FailureGuard:
        return _FailureGuard(self.group)


class _FailureGuard:
    """Turns a failed message into the group's failure (naming the dead rank when there is one)."""

    def __init__(self, group: StageGroup) -> None:
        self.group = group

    def __enter__(self) -> None:
        self.group.raise_if_failed()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        if error is None or isinstance(error, ParallelError) or not isinstance(error, Exception):
            return
        cause = self.group.wait_for_cause(2.0) or f"a pipeline message failed: {error}"
        self.group.fail(cause)
        raise PipelineParallelError(cause) from error
