"""A reasoning model's output split into thinking (`reasoning_content`) and answer (`content`), whole or streamed.

The format (`--reasoning-parser`, runtime/reasoning_format.py) names the markers; whether the output starts inside
thinking is read from the end of the rendered prompt (a template that opens ``<think>``, or DeepSeek-R1's format,
which always starts inside), and whether the prompt already closed thinking (Qwen3 with thinking disabled: then
the whole output is answer and a constraint applies from its first token). Streamed text is split as it comes: a
marker cut across deltas is held back until it is whole or cannot be one, so the concatenated deltas equal the
whole split.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from sprig.runtime.model.tokenizer import Tokenizer
from sprig.runtime.reasoning_format import ReasoningFormat

PROMPT_TAIL_TOKENS = 16  # why: the markers a template leaves at the prompt's end fit in a few tokens


class _Phase(Enum):
    BEFORE = "before"  # not inside yet: the output may still open thinking with the start marker
    OPENING = "opening"  # inside, where a start marker the model writes anyway is dropped
    INSIDE = "inside"
    ANSWER = "answer"


@dataclass(frozen=True)
class ReasoningPlan:
    """How one request's output relates to thinking."""

    fmt: ReasoningFormat
    inside: bool  # the output starts inside thinking
    thinking_first: bool  # the prompt has not closed thinking: a constraint and a budget wait for its end
    separate: bool  # the client wants thinking apart from the answer
    stream: bool = True  # streamed as it comes; False: in one chunk once thinking ends (SGLang's stream_reasoning)

    @classmethod
    def after(cls, fmt: ReasoningFormat, prompt_tail: str, separate: bool, inside: bool = False,
              stream: bool = True) -> ReasoningPlan:
        """The plan of output that follows `prompt_tail`; `inside`: the caller says it starts inside thinking."""
        closed = fmt.closed_in(prompt_tail) and not inside
        return cls(fmt, (inside or fmt.inside_after(prompt_tail)) and not closed, not closed, separate, stream)

    @classmethod
    def of(cls, fmt: ReasoningFormat, tokenizer: Tokenizer, prompt_ids: list[int], separate: bool,
           stream: bool = True) -> ReasoningPlan:
        """The plan of output that follows a tokenized prompt."""
        return cls.after(fmt, tokenizer.decode(prompt_ids[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False),
                         separate, stream=stream)

    def splitter(self) -> ReasoningSplitter:
        return ReasoningSplitter(self.fmt, self.inside, closed=not self.thinking_first)


class ReasoningSplitter:
    """Incremental split of one output: `feed` each text delta, `flush` at the end; each returns (thinking,
    answer) text to emit now."""

    def __init__(self, fmt: ReasoningFormat, inside: bool, closed: bool = False) -> None:
        self.fmt = fmt
        self.phase = _Phase.ANSWER if closed else (_Phase.OPENING if inside else _Phase.BEFORE)
        self.held = ""
        self.entered = self.phase is _Phase.OPENING  # thinking was (or is) under way

    def feed(self, text: str) -> tuple[str, str]:
        self.held += text
        thinking, answer = [], []
        while self.held:
            if self.phase in (_Phase.BEFORE, _Phase.OPENING):
                if not self._open():
                    break
            elif self.phase is _Phase.INSIDE:
                end = self.held.find(self.fmt.end)
                if end < 0:
                    keep = partial_marker_len(self.held, self.fmt.end)
                    thinking.append(self.held[: len(self.held) - keep])
                    self.held = self.held[len(self.held) - keep:]
                    break
                thinking.append(self.held[:end])
                self.held = self.held[end + len(self.fmt.end):]
                self.phase = _Phase.ANSWER
            else:
                answer.append(self.held)
                self.held = ""
        return "".join(thinking), "".join(answer)

    def _open(self) -> bool:
        """Decide whether the output opens with the start marker; False while it cannot be told yet."""
        body = self.held.lstrip()
        if body.startswith(self.fmt.start):
            self.held = body[len(self.fmt.start):]
            self.phase, self.entered = _Phase.INSIDE, True
            return True
        if body == "" or self.fmt.start.startswith(body):
            return False
        self.phase = _Phase.INSIDE if self.phase is _Phase.OPENING else _Phase.ANSWER
        return True

    @property
    def answering(self) -> bool:
        """Thinking is over (or never came): what follows is answer."""
        return self.phase is _Phase.ANSWER

    def flush(self) -> tuple[str, str]:
        """What is still held when the output ends: thinking if inside (an unclosed or cut marker), else answer."""
        rest, self.held = self.held, ""
        inside = self.phase in (_Phase.OPENING, _Phase.INSIDE)
        return (rest, "") if inside else ("", rest)


def split_reasoning(plan: ReasoningPlan, text: str) -> tuple[str | None, str]:
    """A whole output as (thinking or None when there was none, answer)."""
    splitter = plan.splitter()
    thinking, answer = splitter.feed(text)
    more_thinking, more_answer = splitter.flush()
    return (thinking + more_thinking if splitter.entered else None), answer + more_answer


def partial_marker_len(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (a marker a stream may have cut): what to hold
    back. Shared by the reasoning splitter and the tool-call parser."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


class ResultSplitter:
    """/generate's `separate_reasoning` (the keys of SGLang's /separate_reasoning): each result's `text` becomes the
    answer and `reasoning_text` the thinking; streamed, cumulative chunks are split whole and incremental ones
    through one splitter per sequence."""

    def __init__(self, plans: list[ReasoningPlan]) -> None:
        self.plans = plans  # one per sequence
        self.splitters = [p.splitter() for p in plans]

    def result(self, index: int, result: dict[str, Any]) -> dict[str, Any]:
        """A result (or a cumulative chunk) with its whole text split."""
        thinking, answer = split_reasoning(self.plans[index], result["text"])
        return {**result, "text": answer, "reasoning_text": thinking}

    def increment(self, index: int, chunk: dict[str, Any], finished: bool) -> dict[str, Any]:
        """An incremental chunk: only the thinking and answer text that is new (markers held back until whole)."""
        splitter = self.splitters[index]
        thinking, answer = splitter.feed(chunk["text"])
        if finished:
            more_thinking, more_answer = splitter.flush()
            thinking, answer = thinking + more_thinking, answer + more_answer
        return {**chunk, "text": answer, "reasoning_text": thinking}
