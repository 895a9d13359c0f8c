"""When a request stops, and which text it may stream before it does.

`StopChecker` follows one request token by token. For each sampled token, `step` checks, in this order:

1. a stop token: one of `stop_token_ids`, or EOS unless `ignore_eos` -> `stop`, matched = the token id. The
   token stays in the output ids but its text is not added (SGLang trims the matched stop token's text);
2. a stop string in the detokenized text, matched across token boundaries -> `stop`, matched = the string;
   the text is cut where the earliest stop string begins (on a tie, the one listed first wins), so neither it
   nor anything after it is returned;
   a `stop_regex` pattern that matches the text counts the same way, matched = the pattern, cut where the
   match begins (the earliest start of a string or regex match wins; a string wins a tie);
3. `max_new_tokens` reached -> `length`.

With `no_stop_trim` nothing is cut: the matched stop token's text and the text of the token that completed a
stop string or regex (the match and what follows it in that token) stay in the output, as in SGLang.

Nothing stops before `min_new_tokens` tokens exist (counting the current one); a stop string counts only if it
ends in text produced once that minimum is reached (vLLM's rule). While streaming, the longest tail of the text
that could still grow into a stop string is held back, so a stream never shows text that a later cut removes;
it is released as soon as it can no longer match, or when the request finishes. A stop regex holds back the
tail from which the text could still grow into a match (`stop_regex.partial_start`); its matches are searched
only in text produced once `min_new_tokens` is reached. With `no_stop_trim` nothing is held back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from sprig.runtime.engine.sampling_params import SamplingParams
from sprig.runtime.engine.stop_regex import first_match, partial_start


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
        self.stop_regex = tuple(params.stop_regex)
        self.trim = not params.no_stop_trim
        self.num_tokens = 0
        self.finish: FinishReason | None = None
        self._text = ""
        self._emitted = 0
        # Stop regex matches are searched from here: the earliest place a match could still start (text before
        # min_new_tokens is skipped), so a step searches the open tail, not the whole text.
        self._regex_from = 0

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
        elif not self.trim:
            self._text += detok.add(token_id)  # no_stop_trim: the stop token's text stays
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
        """Append `delta`; on a stop string or regex that ends inside it, cut the text there (unless
        `no_stop_trim`) and return the reason."""
        old_len = len(self._text)
        self._text += delta
        if self.num_tokens < self.params.min_new_tokens:
            self._regex_from = len(self._text)
            return None
        if not delta:
            return None
        best = self._string_match(old_len)
        if self.stop_regex:
            found = first_match(self.stop_regex, self._text, self._regex_from)
            if found is None:  # why: a later match can only start where a partial one starts now: search from there
                self._regex_from = partial_start(self.stop_regex, self._text, self._regex_from)
            elif best is None or found.start < best[0]:
                best = (found.start, found.pattern)
        if best is None:
            return None
        if self.trim:
            self._text = self._text[: best[0]]
            self._emitted = min(self._emitted, len(self._text))
        return FinishReason(FinishType.STOP, best[1])

    def _string_match(self, old_len: int) -> tuple[int, str] | None:
        """The earliest stop string that ends in the text after `old_len`, as (start, string)."""
        best: tuple[int, str] | None = None
        for stop in self.stop_strings:
            # only matches that end inside the new text: older ones were checked (or were before min_new_tokens)
            start = self._text.find(stop, max(0, old_len - len(stop) + 1))
            if start >= 0 and (best is None or start < best[0]):
                best = (start, stop)
        return best

    def _release(self, final: bool) -> str:
        """The text that may be streamed now; all of it when `final`, else all but a possible stop prefix."""
        end = len(self._text) if final else len(self._text) - self._holdback()
        out = self._text[self._emitted:end]
        self._emitted = max(self._emitted, end)
        return out

    def _holdback(self) -> int:
        """Length of the longest unreleased suffix of the text that is a proper prefix of some stop string or
        could still grow into a stop regex match; 0 with `no_stop_trim` (nothing would be cut)."""
        if not self.trim:
            return 0
        text = self._text
        best = 0
        if self.stop_regex:
            best = len(text) - max(self._emitted, self._regex_from)  # `_add_text` keeps _regex_from current
        for stop in self.stop_strings:
            lo = max(self._emitted, len(text) - len(stop) + 1)  # a longer suffix cannot be a proper prefix
            i = text.find(stop[0], lo)
            while i >= 0 and len(text) - i > best:
                if stop.startswith(text[i:]):
                    best = len(text) - i  # earliest start = longest suffix for this stop string
                    break
                i = text.find(stop[0], i + 1)
        return best
