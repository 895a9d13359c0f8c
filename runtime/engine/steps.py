"""What the step loops (`serial.py`, `overlap.py`, `pipeline.py`) and the core's phases pass each other: a step's
rows, its sampled tokens, and the engine's counters."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sprig.runtime.engine.request import Logprob, Request
from sprig.runtime.engine.scheduler import ScheduledSeq


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
    """A sampled token and its logprob entry, before it is appended (the overlap schedule appends it one step later)."""

    req: Request
    token: int
    logprob: Logprob | None
