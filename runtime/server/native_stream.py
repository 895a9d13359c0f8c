"""How /generate cuts its SSE chunks: `stream_interval` batching and SGLang's incremental streaming mode.

The engine's events are cumulative (the text, ids and logprobs so far), so skipping one loses nothing: a sequence
gets a chunk when it finishes, on its first tokens, and then once at least `stream_interval` new tokens exist.
With `--incremental-streaming-output` a chunk carries only what is new since that sequence's previous chunk
(text, `output_ids` and the logprob lists); `meta_info.output_token_logprobs_length` is the cumulative count in
both modes, as SGLang reports it, so a client can place each slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_LIST_META = ("output_token_logprobs", "output_top_logprobs", "input_token_logprobs", "input_top_logprobs")


@dataclass
class _Sent:
    """What one sequence's client has been sent: token count, text length and each logprob list's length."""

    tokens: int = 0
    chars: int = 0
    lists: tuple[int, ...] = (0, 0, 0, 0)
    started: bool = False


class ChunkCutter:
    """Per-call chunking state for a native stream (one per /generate request)."""

    def __init__(self, intervals: list[int], incremental: bool) -> None:
        """`intervals[i]`: the stream_interval of sequence i (prompt-major, n copies consecutive)."""
        self.intervals = intervals
        self.incremental = incremental
        self.sent: dict[int, _Sent] = {}

    def cut(self, event: dict[str, Any], force: bool = False) -> dict[str, Any] | None:
        """The chunk to send for this cumulative `event`, or None while it waits for `stream_interval` tokens."""
        index = event.get("index", 0)
        sent = self.sent.setdefault(index, _Sent())
        tokens = len(event["output_ids"])
        finished = event["meta_info"].get("finish_reason") is not None
        interval = self.intervals[index] if index < len(self.intervals) else 1
        if not (force or finished or not sent.started or tokens - sent.tokens >= interval):
            return None
        chunk = self._shape(event, sent)
        self.sent[index] = _Sent(tokens, len(event["text"]), self._lengths(event["meta_info"]), True)
        return chunk

    def _shape(self, event: dict[str, Any], sent: _Sent) -> dict[str, Any]:
        meta = dict(event["meta_info"])
        if "output_token_logprobs" in meta:
            meta["output_token_logprobs_length"] = len(meta["output_token_logprobs"])
        if not self.incremental:
            return {**event, "meta_info": meta}
        for key, start in zip(_LIST_META, sent.lists, strict=True):
            if key in meta:
                meta[key] = meta[key][start:]
        return {**event, "text": event["text"][sent.chars:], "output_ids": event["output_ids"][sent.tokens:],
                "meta_info": meta}

    @staticmethod
    def _lengths(meta: dict[str, Any]) -> tuple[int, ...]:
        return tuple(len(meta.get(key) or ()) for key in _LIST_META)


def stream_intervals(params: Any, prompts: int) -> list[int]:
    """Each sequence's `stream_interval` (1 when unset) from the cleaned sampling_params of a /generate call."""
    plist = params if isinstance(params, list) else [params or {}] * prompts
    out: list[int] = []
    for p in plist:
        interval = p.get("stream_interval")
        interval = interval if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0 else 1
        out += [interval] * (p.get("n") or 1)
    return out
