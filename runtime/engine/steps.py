"""What the engine's step drivers share: a step's rows, tokens whose stop checks wait, the counters, and the
interface of the core they drive (`StepHost`: `EngineCore` is one). Steps one after another live in the core;
`overlap.py` and `pipeline.py` drive the same core with a step beside the forward or several in flight.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from sprig.runtime.engine.constraints import PendingMasks
from sprig.runtime.engine.request import Logprob, Request
from sprig.runtime.engine.scheduler import ScheduledSeq, Scheduler
from sprig.runtime.engine.spec.speculator import Draft
from sprig.runtime.model.runner import ModelRunner, SeqInput, StepOutput


@dataclass
class EngineCounters:
    steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    computed_tokens: int = 0  # tokens whose KV a forward computed (prefill + decode)
    finished_requests: int = 0
    aborted_requests: int = 0
    request_errors: int = 0
    model_time: float = 0.0
    step_time: float = 0.0
    decode_steps: int = 0
    decode_batch_tokens: int = 0
    jump_forward_tokens: int = 0
    forward_gap_time: float = 0.0  # from the end of one forward to the start of the next, while busy
    forward_gaps: int = 0
    recent_step_tokens: deque[int] = field(default_factory=lambda: deque(maxlen=64))


@dataclass(frozen=True)
class Row:
    """One scheduled row, with what it does fixed before its KV length advances."""

    seq: ScheduledSeq
    first_pos: int  # kv_len before the step
    prompt_logprobs: bool  # the step's logits give prompt logprobs
    completes: bool  # the step computes the last known token: a token is sampled (or the prompt-only request ends)

    @property
    def req(self) -> Request:
        return self.seq.req


@dataclass(frozen=True)
class Sampled:
    """A token the overlap schedule fed to the next step before running its stop checks (done beside that step)."""

    req: Request
    token: int
    logprob: Logprob | None


class StepHost(Protocol):
    """The core's parts a step driver uses: scheduling, the runner, and each phase of a step."""

    scheduler: Scheduler
    runner: ModelRunner
    counters: EngineCounters

    def seq_input(self, s: ScheduledSeq, draft: Draft | None = None) -> SeqInput: ...
    def start_masks(self, plan: list[ScheduledSeq], drafts: dict[Request, Draft]) -> PendingMasks: ...
    def plan_rows(self, plan: list[ScheduledSeq]) -> list[Row]: ...
    def advance(self, rows: list[Row], lag: bool) -> None: ...
    def forward(self, seqs: list[SeqInput]) -> StepOutput: ...
    def finish_rows(self, rows: list[Row], out: StepOutput, masks: PendingMasks, drafts: dict[Request, Draft],
                    defer: bool) -> list[Request]: ...
    def count_step(self, plan: list[ScheduledSeq], elapsed: float) -> None: ...
    def check_sampled(self, sampled: list[Sampled]) -> list[Request]: ...
    def take_deferred(self) -> list[Sampled]: ...
    def notify(self, updated: list[Request]) -> None: ...
    def mark_idle(self) -> None: ...
