"""A request's output text: detokenized token by token, and cut where the request stops.

Both work on the same text one token at a time: `StopChecker.step` feeds each token to the request's
`IncrementalDetokenizer` (through `TextSource`, which tests fake) and matches stop strings and regexes in what
it emits.

**Detokenizing** never emits half a character. `IncrementalDetokenizer` uses the prefix/read offset technique of
vLLM and TGI: it decodes only a small window of recent ids, `ids[prefix_offset:]`, and emits what that window adds
beyond `ids[prefix_offset:read_offset]`, which was already emitted. Decoding a window that starts a few tokens back
(in the prompt, for the first token) keeps decoders that treat the first token specially (SentencePiece's
leading-space strip) from changing the text. The cost per token is O(window), not O(sequence).

A token may end inside a multi-byte UTF-8 character (byte-level BPE pieces, SentencePiece `<0xE2>` byte-fallback
tokens); the window then decodes to a trailing U+FFFD and the text is held back until the character completes.
Policies:
- `flush()` at the end of a request releases what is held, replacement characters included, so the concatenated
  deltas equal `tokenizer.decode(output_ids)` (for decoders without a first-token rule; otherwise the text that
  `decode(prompt_ids + output_ids)` adds to `decode(prompt_ids)`).
- Garbage bytes that never form a character would keep the window growing; after `max_pending` held tokens the
  held text is emitted as it decodes (with U+FFFD), keeping the cost bounded. Only such invalid byte runs can
  make the stream differ from a one-shot decode.
- Ids the tokenizer does not know (a model vocab padded beyond the tokenizer's) decode to nothing.
- Special tokens are dropped when `skip_special_tokens`, else shown as their text. `spaces_between_special_tokens`
  is accepted for API parity; like Hugging Face fast tokenizers, `tokenizers.Tokenizer` decoding ignores it.

**Stopping**: when a request stops, and which text it may stream before it does. `StopChecker` follows one
request token by token. For each sampled token, `step` checks, in this order:

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from tokenizers import Tokenizer

from sprig.runtime.engine.generate_request import SamplingParams
from sprig.runtime.engine.stop_regex import first_match, partial_start

REPLACEMENT_CHAR = "\ufffd"
INITIAL_CONTEXT = 5  # prompt tokens decoded with the first output token (vLLM/SGLang use 5)
DEFAULT_MAX_PENDING = 16  # a valid character spans at most 4 byte tokens; more held tokens are garbage


class IncrementalDetokenizer:
    """Turns one request's output ids into text deltas, token by token (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_ids: Sequence[int] = (),
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        """`prompt_ids` give the decoding context of the first output tokens; only their tail is kept."""
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.max_pending = max_pending
        self._ids: list[int] = self._context(prompt_ids)  # the window's ids; older ones are dropped
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._prefix_text = self._decode(self._ids)
        self.output_ids: list[int] = []
        self.text = ""  # everything emitted so far

    def add(self, token_id: int) -> str:
        """Take one output token; return the text that became final (possibly empty)."""
        self.output_ids.append(token_id)
        self._ids.append(token_id)
        new_text = self._decode(self._ids[self._prefix_offset:])
        pending = len(self._ids) - self._read_offset
        if new_text.endswith(REPLACEMENT_CHAR) and pending < self.max_pending:
            return ""  # the last character is not complete yet
        return self._emit(new_text)

    def add_many(self, token_ids: Iterable[int]) -> str:
        """Take several output tokens; return the concatenated final text."""
        return "".join(self.add(t) for t in token_ids)

    def flush(self) -> str:
        """Release the held-back text (end of the request); later tokens continue from here."""
        if self._read_offset == len(self._ids):
            return ""
        return self._emit(self._decode(self._ids[self._prefix_offset:]))

    def _emit(self, new_text: str) -> str:
        """Emit what `new_text` (the window's text) adds beyond the prefix text and move the window forward."""
        delta = new_text[len(self._prefix_text):] if len(new_text) > len(self._prefix_text) else ""
        chunk = self._ids[self._read_offset:]
        chunk_text = self._decode(chunk)
        if chunk_text or len(self._ids) - self._prefix_offset > self.max_pending:
            self._prefix_offset, self._prefix_text = self._read_offset, chunk_text
        else:  # only skipped special tokens: keep the visible context so a leading-space rule still sees it
            self._prefix_text = new_text
        self._read_offset = len(self._ids)
        self._trim()
        self.text += delta
        return delta

    def _trim(self) -> None:
        """Drop ids before the window so memory and slicing stay O(window)."""
        if self._prefix_offset > 0:
            del self._ids[: self._prefix_offset]
            self._read_offset -= self._prefix_offset
            self._prefix_offset = 0

    def _context(self, prompt_ids: Sequence[int]) -> list[int]:
        """The prompt's last few ids, starting where their text does not begin mid-character."""
        tail = list(prompt_ids[-INITIAL_CONTEXT:]) if len(prompt_ids) else []
        for start in range(len(tail)):
            # a window starting inside a character turns it (and a byte-fallback run after it) into U+FFFD
            if not self._decode(tail[start:]).startswith(REPLACEMENT_CHAR):
                return tail[start:]
        return []

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)


def decode_stream(tokenizer: Tokenizer, prompt_ids: Sequence[int], output_ids: Iterable[int],
                  skip_special_tokens: bool = True) -> list[str]:
    """All deltas of streaming `output_ids`, the flushed tail last (a convenience for tests and tools)."""
    detok = IncrementalDetokenizer(tokenizer, prompt_ids, skip_special_tokens)
    deltas = [detok.add(t) for t in output_ids]
    deltas.append(detok.flush())
    return deltas


# --- stop checks -------------------------------------------------------------------------------------------

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
