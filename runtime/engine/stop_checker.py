"""When a request stops, and which text it may stream before it does.

`StopChecker` follows one request token by token. For each sampled token, `step` checks, in this order:

1. a stop token: one of `stop_token_ids`, or EOS unless `ignore_eos` -> `stop`, matched = the token id. The
   token stays in the output ids but its text is not added (SGLang trims the matched stop token's text);
2. a stop string in the detokenized text, matched across token boundaries -> `stop`, matched = the string;
   the text is cut where the earliest stop string begins (on a tie, the one listed first wins), so neither it
   nor anything after it is returned;
3. `max_new_tokens` reached -> `length`.

Nothing stops before `min_new_tokens` tokens exist (counting the current one); a stop string counts only if it
ends in text produced once that minimum is reached (vLLM's rule). While streaming, the longest tail of the text
that could still grow into a stop string is held back, so a stream never shows text that a later cut removes;
it is released as soon as it can no longer match, or when the request finishes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from sprig.runtime.engine.sampling_params import SamplingParams


class FinishType(str, Enum):
    """Why a request finished (the `type` of the API's `finish_reason`)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(frozen=True)
class FinishReason:
    """`finish_reason` of the API: the type, and the stop token id or stop string that matched (else None)."""

    type: FinishType
    matched: int | str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: {"type": "stop"|"length"|"abort", "matched": id | string | None}."""
        return {"type": self.type.value, "matched": self.matched}


class TextSource(Protocol):
    """What `StopChecker` needs from a detokenizer (`IncrementalDetokenizer` is one)."""

    def add(self, token_id: int) -> str:
        """Take one token; return the text that became final."""
        ...

    def flush(self) -> str:
        """Return whatever text is still held back (the request is over)."""
        ...


@dataclass(frozen=True)
class StopStep:
    """The result of one step: text safe to stream now, and the finish reason if the request is over."""

    delta: str
    finish: FinishReason | None = None


class StopChecker:
    """Stop conditions and stream holdback for one request (see the module docstring)."""

    def __init__(self, params: SamplingParams, eos_token_ids: Iterable[int] = ()) -> None:
        """`eos_token_ids` are the model's end ids; they stop the request unless `params.ignore_eos`."""
        self.params = params
        self.stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else
                                                            frozenset(eos_token_ids))
        self.stop_strings = tuple(params.stop)
        self.num_tokens = 0
        self.finish: FinishReason | None = None
        self._text = ""
        self._emitted = 0

    @property
    def text(self) -> str:
        """All output text accepted so far (streamed or held back), cut before a matched stop string."""
        return self._text

    @property
    def finished(self) -> bool:
        """True once a finish reason is set."""
        return self.finish is not None

    def step(self, token_id: int, detok: TextSource) -> StopStep:
        """Account for one generated token; `detok` is fed the token unless it is a matched stop token."""
        if self.finish is not None:
            raise RuntimeError("step() after the request finished")
        self.num_tokens += 1
        reason = self._token_stop(token_id)
        if reason is None:
            reason = self._add_text(detok.add(token_id))
        if reason is None and self.num_tokens >= self.params.max_new_tokens:
            reason = FinishReason(FinishType.LENGTH)
        if reason is None:
            return StopStep(self._release(final=False))
        if reason.type is not FinishType.STOP or isinstance(reason.matched, int):
            reason = self._add_text(detok.flush()) or reason  # the detokenizer's held tail belongs to the output
        return self._finish(reason)

    def abort(self, detok: TextSource | None = None) -> StopStep:
        """Finish with `abort`, releasing the held-back text (it is genuine output, just cut short)."""
        if self.finish is not None:
            return StopStep("", self.finish)
        if detok is not None:
            self._text += detok.flush()
        return self._finish(FinishReason(FinishType.ABORT))

    def _finish(self, reason: FinishReason) -> StopStep:
        self.finish = reason
        return StopStep(self._release(final=True), reason)

    def _token_stop(self, token_id: int) -> FinishReason | None:
        if token_id in self.stop_ids and self.num_tokens >= self.params.min_new_tokens:
            return FinishReason(FinishType.STOP, token_id)
        return None

    def _add_text(self, delta: str) -> FinishReason | None:
        """Append `delta`; on a stop string that ends inside it, cut the text there and return the reason."""
        old_len = len(self._text)
        self._text += delta
        if not delta or not self.stop_strings or self.num_tokens < self.params.min_new_tokens:
            return None
        best: tuple[int, str] | None = None
        for stop in self.stop_strings:
            # only matches that end inside the new text: older ones were checked (or were before min_new_tokens)
            start = self._text.find(stop, max(0, old_len - len(stop) + 1))
            if start >= 0 and (best is None or start < best[0]):
                best = (start, stop)
        if best is None:
            return None
        self._text = self._text[: best[0]]
        self._emitted = min(self._emitted, len(self._text))
        return FinishReason(FinishType.STOP, best[1])

    def _release(self, final: bool) -> str:
        """The text that may be streamed now; all of it when `final`, else all but a possible stop prefix."""
        end = len(self._text) if final else len(self._text) - self._holdback()
        out = self._text[self._emitted:end]
        self._emitted = max(self._emitted, end)
        return out

    def _holdback(self) -> int:
        """Length of the longest unreleased suffix of the text that is a proper prefix of some stop string."""
        best = 0
        text = self._text
        for stop in self.stop_strings:
            lo = max(self._emitted, len(text) - len(stop) + 1)  # a longer suffix cannot be a proper prefix
            i = text.find(stop[0], lo)
            while i >= 0 and len(text) - i > best:
                if stop.startswith(text[i:]):
                    best = len(text) - i  # earliest start = longest suffix for this stop string
                    break
                i = text.find(stop[0], i + 1)
        return best
