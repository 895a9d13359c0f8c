"""Engine results → OpenAI responses and stream chunks (completions and chat, with logprobs and tool calls).

Streams: every chunk has `choices`; the usage-only chunk (``choices: []``) comes last and only with
``stream_options.include_usage``. Chunks are cut from the engine's deltas (`StepDelta`: the text, ids and logprobs
new since the last one), so the concatenated stream equals the non-streamed text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sprig.runtime.engine.request import SequenceMeta, StepDelta
from sprig.runtime.server.openai_convert import (
    OpenAIPlan,
    chat_logprobs,
    completion_logprobs,
    finish_reason,
    result_entries,
    usage_of,
)
from sprig.runtime.server.openai_protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionResponse,
    ReasoningDelta,
    ReasoningMessageOut,
    ToolCall,
)
from sprig.runtime.server.openai_tools import ToolChoiceKind, calls_from_output
from sprig.runtime.server.reasoning import split_reasoning
from sprig.runtime.server.state import TokenTexts
from sprig.runtime.server.tool_formats import CallEvent


@dataclass
class ResponseIds:
    """What every response and chunk of one request repeats."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


def _reason_with_tools(reason: str | None, calls: list[ToolCall]) -> str | None:
    return "tool_calls" if calls and reason == "stop" else reason


# --- non-streaming ------------------------------------------------------------------------------------------


def completion_response(ids: ResponseIds, plan: OpenAIPlan, results: list[dict[str, Any]],
                        texts: TokenTexts) -> CompletionResponse:
    choices = []
    for i, r in enumerate(results):
        prefix = plan.prompt_texts[i // plan.n] if plan.echo else ""
        logprobs = None
        if plan.logprobs is not None:
            logprobs, _ = completion_logprobs(result_entries(r["meta_info"], plan.echo), texts, 0)
        choices.append(CompletionChoice(i, prefix + r["text"], logprobs, finish_reason(r["meta_info"])))
    return CompletionResponse(ids.id, ids.created, ids.model, choices, usage_of([r["meta_info"] for r in results], plan.n))


def chat_response(ids: ResponseIds, plan: OpenAIPlan, results: list[dict[str, Any]],
                  texts: TokenTexts) -> ChatCompletionResponse:
    choices = []
    split = plan.reasoning if plan.reasoning is not None and plan.reasoning.separate else None
    for i, r in enumerate(results):
        thinking, text = split_reasoning(split, r["text"]) if split is not None else (None, r["text"])
        content: str | None = text
        calls: list[ToolCall] = []
        if plan.tools is not None and plan.tools.kind is not ToolChoiceKind.NONE:
            content, calls = calls_from_output(plan.tools, text)
        logprobs = chat_logprobs(result_entries(r["meta_info"], False), texts) if plan.logprobs is not None else None
        message = ChatMessageOut(content, tool_calls=calls or None) if split is None else \
            ReasoningMessageOut(content, tool_calls=calls or None, reasoning_content=thinking)
        reason = _reason_with_tools(finish_reason(r["meta_info"]), calls)
        choices.append(ChatChoice(i, message, logprobs, reason))
    return ChatCompletionResponse(ids.id, ids.created, ids.model, choices, usage_of([r["meta_info"] for r in results], plan.n))


# --- streaming ----------------------------------------------------------------------------------------------


class _Progress:
    """What one choice has been sent: its logprob text offset, whether it started and finished."""

    def __init__(self) -> None:
        self.offset = 0
        self.started = False
        self.finished = False


class CompletionStreamer:
    """Turns the engine's deltas into /v1/completions chunks."""

    def __init__(self, ids: ResponseIds, plan: OpenAIPlan, texts: TokenTexts) -> None:
        self.ids, self.plan, self.texts = ids, plan, texts
        self.progress = [_Progress() for _ in range(plan.call.request.num_sequences)]

    def chunk(self, delta: StepDelta) -> CompletionChunk | None:
        i = delta.index
        p = self.progress[i]
        text = "".join(delta.text)
        first = not p.started
        if first and self.plan.echo:
            text = self.plan.prompt_texts[i // self.plan.n] + text
        logprobs = None
        if self.plan.logprobs is not None and (delta.ids or first):
            entries = [*delta.input_logprobs, *delta.output_logprobs] if self.plan.echo else delta.output_logprobs
            logprobs, p.offset = completion_logprobs(entries, self.texts, p.offset)
        reason = delta.meta.finish_type
        p.started = True
        if not text and logprobs is None and reason is None:
            return None
        p.finished = reason is not None
        return self._wrap([CompletionChoice(i, text, logprobs, reason)])

    def aborted(self) -> CompletionChunk | None:
        """Close every unfinished choice with finish_reason abort (shutdown)."""
        choices = [CompletionChoice(i, "", None, "abort") for i, p in enumerate(self.progress) if not p.finished]
        return self._wrap(choices) if choices else None

    def _wrap(self, choices: list[CompletionChoice]) -> CompletionChunk:
        return CompletionChunk(self.ids.id, self.ids.created, self.ids.model, choices)

    def usage(self, metas: list[SequenceMeta]) -> CompletionChunk:
        usage = usage_of([m.to_dict() for m in metas], self.plan.n)
        return CompletionChunk(self.ids.id, self.ids.created, self.ids.model, [], usage)


def _call_delta(index: int, call_id: str, name: str, head: bool, piece: str | None) -> dict[str, Any]:
    """One call's delta as OpenAI writes it: id, type and name only in its first, absent (not null) after."""
    function: dict[str, Any] = {"name": name} if head else {}
    if piece or head:
        function["arguments"] = piece or ""
    out: dict[str, Any] = {"index": index, "function": function}
    return {**out, "id": call_id, "type": "function"} if head else out


class ChatStreamer:
    """Turns the engine's deltas into /v1/chat/completions chunks, tool calls included.

    A call streams as OpenAI streams it: its index, id, type and name in one delta once its header is written,
    then its arguments in pieces; a choice that made a complete call finishes with "tool_calls".
    """

    def __init__(self, ids: ResponseIds, plan: OpenAIPlan, texts: TokenTexts) -> None:
        self.ids, self.plan, self.texts = ids, plan, texts
        count = plan.call.request.num_sequences
        self.progress = [_Progress() for _ in range(count)]
        tools = plan.tools
        parsing = tools is not None and tools.kind is not ToolChoiceKind.NONE
        self.parsers = [tools.parser() for _ in range(count)] if parsing and tools is not None else []
        reasoning = plan.reasoning if plan.reasoning is not None and plan.reasoning.separate else None
        self.splitters = [reasoning.splitter() for _ in range(count)] if reasoning is not None else []
        self.held_thinking = [""] * count if reasoning is not None and not reasoning.stream else []

    def opening(self) -> ChatCompletionChunk:
        """The first chunk: the assistant role for every choice."""
        choices = [ChatChunkChoice(i, ChatDelta(role="assistant", content="")) for i in range(len(self.progress))]
        return self._wrap(choices)

    def chunk(self, step: StepDelta) -> ChatCompletionChunk | None:
        i = step.index
        p = self.progress[i]
        text = "".join(step.text)
        logprobs = chat_logprobs(step.output_logprobs, self.texts) if self.plan.logprobs is not None and \
            step.ids else None
        reason = step.meta.finish_type
        thinking, text = self._split(i, text, reason is not None)
        delta = self._delta(i, text, reason is not None)
        if thinking:
            delta = ReasoningDelta(reasoning_content=thinking, content=delta.content if delta else None,
                                   tool_calls=delta.tool_calls if delta else None)
        if delta is None and logprobs is None and reason is None:
            return None
        p.finished = reason is not None
        if self.parsers and reason == "stop" and self.parsers[i].complete_calls():
            reason = "tool_calls"
        return self._wrap([ChatChunkChoice(i, delta or ChatDelta(), logprobs, reason)])

    def _split(self, i: int, text: str, final: bool) -> tuple[str, str]:
        """(thinking, answer) text of a delta, markers held back until whole; the text itself without a split."""
        if not self.splitters:
            return "", text
        splitter = self.splitters[i]
        thinking, answer = splitter.feed(text)
        if final:
            more_thinking, more_answer = splitter.flush()
            thinking, answer = thinking + more_thinking, answer + more_answer
        if self.held_thinking:  # stream_reasoning false: the whole thinking in one chunk, once it is over
            self.held_thinking[i] += thinking
            thinking = ""
            if final or splitter.answering:
                thinking, self.held_thinking[i] = self.held_thinking[i], ""
        return thinking, answer

    def _delta(self, i: int, text: str, final: bool) -> ChatDelta | None:
        if not self.parsers:
            return ChatDelta(content=text) if text else None
        parser = self.parsers[i]
        event = parser.feed(text)
        if final:
            last = parser.finish()
            event = CallEvent(event.content + last.content, event.headers + last.headers,
                              {k: event.pieces.get(k, "") + last.pieces.get(k, "")
                               for k in {*event.pieces, *last.pieces}})
        calls = []
        for k in sorted({*event.headers, *event.pieces}):
            call = parser.calls[k] if k < len(parser.calls) else None
            if call is None:
                continue
            calls.append(_call_delta(k, call.id, call.name, k in event.headers, event.pieces.get(k)))
        if not event.content and not calls:
            return None
        return ChatDelta(content=event.content or None, tool_calls=calls or None)

    def aborted(self) -> ChatCompletionChunk | None:
        choices = [ChatChunkChoice(i, ChatDelta(), None, "abort") for i, p in enumerate(self.progress)
                   if not p.finished]
        return self._wrap(choices) if choices else None

    def _wrap(self, choices: list[ChatChunkChoice]) -> ChatCompletionChunk:
        return ChatCompletionChunk(self.ids.id, self.ids.created, self.ids.model, choices)

    def usage(self, metas: list[SequenceMeta]) -> ChatCompletionChunk:
        usage = usage_of([m.to_dict() for m in metas], self.plan.n)
        return ChatCompletionChunk(self.ids.id, self.ids.created, self.ids.model, [], usage)
