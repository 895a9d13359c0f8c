"""A generation request as the scheduler sees it: its tokens, its KV pages and its output plumbing."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sprig.radix import TreeNode
from sprig.runtime.detokenizer import IncrementalDetokenizer
from sprig.runtime.sampling_params import SamplingParams
from sprig.runtime.stop_checker import FinishReason, FinishType, StopChecker


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class LogprobOptions:
    return_logprob: bool = False
    logprob_start_len: int = -1  # first prompt position whose logprob is returned; -1 = none of the prompt
    top_logprobs_num: int = 0


@dataclass(eq=False)
class Request:
    """One sequence being generated. `fill_ids` (prompt + output) is what the KV pool must hold."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    detok: IncrementalDetokenizer
    stop: StopChecker
    logprobs: LogprobOptions = field(default_factory=LogprobOptions)
    namespace: str = ""
    priority: int = 0
    on_update: Callable[[Request, bool], None] | None = None  # (request, finished) after each step
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    # KV state: pages cover tokens [0, kv_len); the first cached_len of them belong to the radix tree.
    pages: list[int] = field(default_factory=list)
    kv_len: int = 0
    cached_len: int = 0
    node: TreeNode | None = None
    cached_tokens: int = 0  # prompt tokens served from the cache at first admission (reported)
    admitted: bool = False
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    # Logprob outputs: (logprob, token_id, top alternatives as [(logprob, token_id)])
    input_logprobs: list[tuple[float | None, int, list[tuple[float, int]]]] = field(default_factory=list)
    output_logprobs: list[tuple[float, int, list[tuple[float, int]]]] = field(default_factory=list)
    first_token_time: float | None = None
    finish_time: float | None = None
    text_delta: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    grammar_future: Future | None = None  # compiling constraint; resolved by the caller before submission
    matcher: Any = None  # GrammarMatcher of a constrained request

    @property
    def fill_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_fill(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def is_prefilling(self) -> bool:
        """More than one token still lacks KV (a decode step computes exactly one)."""
        return self.num_fill - self.kv_len > 1

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def text(self) -> str:
        return self.stop.text

    def finish(self, reason: FinishReason, error: str | None = None) -> None:
        self.finish_reason = reason
        self.error = error
        self.status = RequestStatus.FINISHED
        self.finish_time = time.monotonic()

    def abort(self, error: str | None = None) -> None:
        """Finish with `abort`, keeping the output produced so far."""
        step = self.stop.abort(self.detok)
        self.text_delta += step.delta
        self.finish(FinishReason(FinishType.ABORT), error)
