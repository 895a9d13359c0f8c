"""A generation request as the scheduler sees it: its tokens, its KV pages and its output plumbing."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sprig.radix import TreeNode
from sprig.runtime.engine.detokenizer import IncrementalDetokenizer
from sprig.runtime.engine.penalties import TokenHistory
from sprig.runtime.engine.sampling_params import SamplingParams
from sprig.runtime.engine.stop_checker import FinishReason, FinishType, StopChecker


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


Logprob = tuple[float | None, int, list[tuple[float, int]]]  # (logprob, token id, top (logprob, id) alternatives)


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
    input_logprobs: list[Logprob] = field(default_factory=list)  # None for the first prompt token
    output_logprobs: list[Logprob] = field(default_factory=list)
    first_token_time: float | None = None
    finish_time: float | None = None
    text_delta: str = ""  # text produced since the last report
    grammar_future: Future | None = None  # compiling constraint; resolved by the caller before submission
    matcher: Any = None  # GrammarMatcher of a constrained request
    penalties: TokenHistory | None = None  # running token counts, when the params ask for penalties
    # How much of the output the caller has been sent (reports carry only what is new).
    reported_ids: int = 0
    reported_output_logprobs: int = 0
    reported_input_logprobs: int = 0
    # The waiting queue's last prefix match: (tree version, fill length, matched tokens).
    prefix_memo: tuple[int, int, int] = (-1, -1, 0)
    fill_ids: list[int] = field(init=False)  # prompt + output as one list, grown by `append_output`

    def __post_init__(self) -> None:
        self.fill_ids = [*self.prompt_ids, *self.output_ids]
        if self.params.has_penalties:
            self.penalties = TokenHistory(self.prompt_ids, self.output_ids)

    def append_output(self, token_id: int) -> None:
        """Add a generated token (O(1): no list is rebuilt per step)."""
        self.output_ids.append(token_id)
        self.fill_ids.append(token_id)
        if self.penalties is not None:
            self.penalties.add_output(token_id)

    @property
    def num_fill(self) -> int:
        return len(self.fill_ids)

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
