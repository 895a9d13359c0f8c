"""Streaming detokenization that never emits half a character.

`IncrementalDetokenizer` uses the prefix/read offset technique of vLLM and TGI: it decodes only a small window of
recent ids, `ids[prefix_offset:]`, and emits what that window adds beyond `ids[prefix_offset:read_offset]`, which
was already emitted. Decoding a window that starts a few tokens back (in the prompt, for the first token) keeps
decoders that treat the first token specially (SentencePiece's leading-space strip) from changing the text. The
cost per token is O(window), not O(sequence).

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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer

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
