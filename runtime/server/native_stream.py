"""How /generate cuts its SSE chunks from the engine's deltas: `stream_interval` batching and SGLang's two shapes.

A sequence gets a chunk when it finishes, on its first tokens, and then once at least `stream_interval` new tokens
exist; deltas held back meanwhile are merged, so skipping one loses nothing. SGLang's default chunk is cumulative
(the text, ids and logprobs so far: built from the run's folded output, the only place the route needs it); with
`--incremental-streaming-output` a chunk carries only what is new since that sequence's previous chunk, straight
from the merged deltas. `meta_info.output_token_logprobs_length` is the cumulative count in both modes, as SGLang
reports it, so a client can place each slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sprig.runtime.engine.generate_request import LogprobOptions
from sprig.runtime.engine.request import StepDelta


@dataclass
class _Sent:
    """One sequence's stream: tokens and output logprobs so far, tokens sent, and the deltas not sent yet."""

    tokens: int = 0
    logprobs: int = 0
    sent_tokens: int = 0
    started: bool = False
    held: StepDelta | None = None


class ChunkCutter:
    """Per-call chunking state for a native stream (one per /generate request)."""

    def __init__(self, intervals: list[int], incremental: bool, lp: LogprobOptions, multi: bool,
                 cumulative: Callable[[int], dict[str, Any]]) -> None:
        """`intervals[i]`: the stream_interval of sequence i (prompt-major, n copies consecutive); `cumulative(i)`:
        sequence i's result dict so far (SGLang's default, non-incremental chunk)."""
        self.intervals = intervals
        self.incremental = incremental
        self.lp = lp
        self.multi = multi
        self.cumulative = cumulative
        self.sent: dict[int, _Sent] = {}

    def cut(self, delta: StepDelta, force: bool = False) -> dict[str, Any] | None:
        """The chunk to send after `delta`, or None while it waits for `stream_interval` tokens."""
        index = delta.index
        seq = self.sent.setdefault(index, _Sent())
        seq.tokens += len(delta.ids)
        seq.logprobs += len(delta.output_logprobs)
        if seq.held is None:
            seq.held = StepDelta(index, list(delta.ids), list(delta.text), list(delta.output_logprobs),
                                 list(delta.input_logprobs), delta.meta, delta.finished)
        else:
            seq.held.merge(delta)
        finished = delta.meta.finished
        interval = self.intervals[index] if index < len(self.intervals) else 1
        if not (force or finished or not seq.started or seq.tokens - seq.sent_tokens >= interval):
            return None
        chunk = self._incremental(seq.held) if self.incremental else self.cumulative(index)
        if self.lp.return_logprob:
            chunk["meta_info"]["output_token_logprobs_length"] = seq.logprobs
        if self.multi:
            chunk["index"] = index
        seq.held, seq.sent_tokens, seq.started = None, seq.tokens, True
        return chunk

    def _incremental(self, held: StepDelta) -> dict[str, Any]:
        meta = held.meta.to_dict()
        if self.lp.return_logprob:
            meta["input_token_logprobs"] = [(lp, tok) for lp, tok, _ in held.input_logprobs]
            meta["output_token_logprobs"] = [(lp, tok) for lp, tok, _ in held.output_logprobs]
            if self.lp.top_logprobs_num > 0:
                meta["input_top_logprobs"] = [top for _, _, top in held.input_logprobs]
                meta["output_top_logprobs"] = [top for _, _, top in held.output_logprobs]
        return {"text": "".join(held.text), "output_ids": held.ids, "meta_info": meta}


def stream_intervals(params: Any, prompts: int) -> list[int]:
    """Each sequence's `stream_interval` (1 when unset) from the cleaned sampling_params of a /generate call."""
    plist = params if isinstance(params, list) else [params or {}] * prompts
    out: list[int] = []
    for p in plist:
        interval = p.get("stream_interval")
        interval = interval if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0 else 1
        out += [interval] * (p.get("n") or 1)
    return out
