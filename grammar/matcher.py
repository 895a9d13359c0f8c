"""Per-request grammar state: fill a bitmask row, accept tokens, roll back, jump forward.

One `GrammarMatcher` per request, created from a shared `CompiledGrammar`. The engine allocates one int32
bitmask for the whole batch (`allocate_token_bitmask`) on the CPU, asks each constrained request to fill its
row, and applies it with `sprig.kernels.bitmask.apply_token_bitmask_`. Rows are written by outlines-core in
native code (no Python loop over the vocabulary on the decode path) and cached per grammar state, since a
state allowing most of a large vocabulary takes milliseconds to write and is revisited by every request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
from outlines_core import Guide

from sprig.grammar.outlines.automaton import CompiledGrammar
from sprig.grammar.schema import labels

MAX_JUMP_BYTES = 256  # why: bounds the work (and the extend pass) of one jump-forward
MAX_ROW_CACHE_BYTES = 16 << 20  # per compiled grammar: finished bitmask rows, reused by every request


def allocate_token_bitmask(batch: int, vocab_size: int) -> torch.Tensor:
    """A CPU int32 bitmask for `batch` rows over `vocab_size` tokens, every token allowed.

    Pinned when CUDA is available, so the copy to the device can overlap compute.
    """
    words = (vocab_size + 31) // 32
    mask = torch.full((batch, words), -1, dtype=torch.int32)
    return mask.pin_memory() if torch.cuda.is_available() else mask


@dataclass(frozen=True)
class JumpForward:
    """Text the grammar forces next, re-tokenized with the tokens before it.

    The engine rolls back its last `rollback` output tokens (and the matcher, via `rollback`), appends
    `token_ids` in one extend pass and feeds them to `accept_tokens`.
    """

    rollback: int
    token_ids: tuple[int, ...]
    text: str


class GrammarMatcher:
    """The state of one request inside a compiled grammar.

    `GrammarMatcher(compiled)` picks the implementation for the compiled grammar's backend: this class for
    outlines-core automata, `matcher_llg.LlgMatcher` for llguidance grammars; both have this interface.
    """

    def __new__(cls, compiled: Any, max_rollback: int = 64) -> GrammarMatcher:
        impl = getattr(compiled, "matcher_class", None)  # another backend's compiled grammar names its matcher
        if cls is GrammarMatcher and impl is not None:
            return super().__new__(impl)
        return super().__new__(cls)

    def __init__(self, compiled: CompiledGrammar, max_rollback: int = 64) -> None:
        self.compiled = compiled
        self._index = compiled.index
        self._info = compiled.tokenizer_info
        self._max_rollback = max_rollback
        self._guide = Guide(self._index, max_rollback=max_rollback + 1)
        # (token, state before it, string scan before it)
        self._history: deque[tuple[int, int, labels.StringScan]] = deque(maxlen=max_rollback)
        self._eos = self._info.eos_token_ids
        self._labels = labels.rules_for(compiled.spec.kind, compiled.regex, self._info)  # hostname A-labels
        self._scan = labels.StringScan()
        self._guide.advance(self._eos[0], return_tokens=False)  # past the leading sentinel (automaton.py)

    # ---- state ----
    @property
    def state(self) -> int:
        return self._guide.get_state()

    def is_terminated(self) -> bool:
        """True once an EOS token has been accepted: the output is complete."""
        return self._guide.is_finished()

    def can_finish(self) -> bool:
        """True if the text so far is a complete match (EOS is allowed now)."""
        return not self.is_terminated() and self._index.get_next_state(self.state, self._eos[0]) is not None

    def reset(self) -> None:
        self._guide.reset()
        self._guide.advance(self._eos[0], return_tokens=False)
        self._history.clear()
        self._scan = labels.StringScan()

    # ---- masks ----
    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        """Write the allowed tokens of the current state into `bitmask[row]` (CPU, int32, contiguous)."""
        if bitmask.dtype != torch.int32 or bitmask.device.type != "cpu" or not bitmask.is_contiguous():
            raise ValueError("bitmask must be a contiguous CPU int32 tensor")
        target = bitmask[row]
        if self.is_terminated():  # why: only EOS makes sense after the end; never an all-false row
            target.zero_()
            for tok in self._eos:
                target[tok // 32] |= _bit(tok % 32)
            return
        cached = self.compiled.mask_rows.get(self.state)
        if cached is not None:
            target.copy_(cached)
        else:
            self._guide.write_mask_into(target.data_ptr(), target.numel(), 4)
            rows = self.compiled.mask_rows
            if len(rows) * target.numel() * 4 < MAX_ROW_CACHE_BYTES:  # why: big states cost ms to write, once
                rows[self.state] = target.clone()
        if self._labels is not None:
            self._labels.restrict(target, self._scan, self._info.token_bytes)

    def allowed_tokens(self) -> list[int]:
        """The allowed token ids of the current state (for tests and debugging; slow on big vocabularies)."""
        return [] if self.is_terminated() else sorted(self._index.get_allowed_tokens(self.state))

    # ---- advancing ----
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar does not allow it here."""
        if not 0 <= token_id < self._info.vocab_size or self.is_terminated():
            return False
        state = self.state
        if self._index.get_next_state(state, token_id) is None:
            return False
        scan = self._scan
        if self._labels is not None and token_id not in self._eos:
            scan, invalid = scan.feed(self._info.token_bytes[token_id] or b"")
            if invalid:  # why: the token ends an A-label that IDNA does not allow
                return False
        self._guide.advance(token_id, return_tokens=False)
        self._history.append((token_id, state, self._scan))
        self._scan = scan
        return True

    def accept_tokens(self, token_ids: list[int] | tuple[int, ...]) -> bool:
        """Accept tokens in order; on the first refusal, undo the ones accepted here and return False."""
        for n, tok in enumerate(token_ids):
            if not self.accept_token(tok):
                self.rollback(n)
                return False
        return True

    def rollback(self, k: int) -> None:
        """Undo the last `k` accepted tokens (at most `max_rollback`)."""
        if k <= 0:
            return
        if k > len(self._history):
            raise ValueError(f"cannot roll back {k} tokens; {len(self._history)} are kept")
        self._guide.rollback_state(k)
        for _ in range(k):
            self._scan = self._history.pop()[2]

    # ---- jump-forward ----
    def find_jump_forward_bytes(self) -> bytes:
        """The bytes every continuation of the current state starts with (empty if there is a choice)."""
        if self.is_terminated():
            return b""
        out = bytearray()
        state = self.state
        byte_tokens = self._info.single_byte_tokens()
        while len(out) < MAX_JUMP_BYTES:
            forced = forced_byte(self.compiled, state)
            if forced < 0:
                break
            out.append(forced)
            state = self._index.get_next_state(state, byte_tokens[forced])
        return bytes(out)

    def find_jump_forward_string(self) -> str:
        """The forced continuation as text, cut at the last whole character ("" if none)."""
        return _whole_chars(self.find_jump_forward_bytes())

    def find_jump_forward_tokens(self) -> JumpForward | None:
        """The forced continuation re-tokenized together with the last output token (see `JumpForward`)."""
        text = self.find_jump_forward_string()
        if not text or self._info.tokenizer is None:
            return None
        for k in (1, 0) if self._accepted_log() else (0,):
            retokenized = self._retokenize(text, k)
            if retokenized is None:
                continue
            recent, ids = retokenized
            if ids and self._accepts_after_rollback(len(recent), ids):
                return JumpForward(len(recent), tuple(ids), text)
        return None

    def _accepted_log(self) -> deque[Any]:
        """The last accepted tokens, oldest first, each entry starting with its token id."""
        return self._history

    def _retokenize(self, text: str, k: int) -> tuple[list[int], list[int]] | None:
        """The last `k` tokens + `text` tokenized again: (the old tokens that change, the new ids), or None."""
        log = self._accepted_log()
        recent = [entry[0] for entry in list(log)[len(log) - k:]]
        prefix = b"".join(self._info.token_bytes[t] or b"" for t in recent)
        try:
            full = prefix.decode("utf-8") + text
        except UnicodeDecodeError:
            return None
        ids = list(self._info.tokenizer.encode(full, add_special_tokens=False).ids)
        if b"".join(self._info.token_bytes[t] or b"\x00" for t in ids) != full.encode("utf-8"):
            return None  # why: the tokenizer rewrote the text (prefix space, normalization): do not guess
        while recent and ids and ids[0] == recent[0]:
            recent.pop(0)
            ids.pop(0)
        return recent, ids

    def _accepts_after_rollback(self, rollback: int, ids: list[int]) -> bool:
        """Whether the automaton, `rollback` tokens back, accepts `ids`."""
        state = self._history[len(self._history) - rollback][1] if rollback else self.state
        for tok in ids:
            state = self._index.get_next_state(state, tok)
            if state is None:
                return False
        return True


def forced_byte(compiled: CompiledGrammar, state: int) -> int:
    """The one byte every continuation from `state` starts with, or -1 (cached per compiled grammar)."""
    cached = compiled.forced_bytes.get(state)
    if cached is not None:
        return cached
    index, info = compiled.index, compiled.tokenizer_info
    result = -1
    if index.get_next_state(state, info.eos_token_ids[0]) is None:  # a complete match is never forced on
        byte_tokens = info.single_byte_tokens()
        if all(t >= 0 for t in byte_tokens[1:]):
            firsts = {b for b in range(1, 256) if index.get_next_state(state, byte_tokens[b]) is not None}
        else:  # why: without a token per byte, look at every allowed token's first byte (exact, slower)
            firsts = {info.token_bytes[t][0] for t in index.get_allowed_tokens(state) if info.token_bytes[t]}
        if len(firsts) == 1 and byte_tokens[next(iter(firsts))] >= 0:
            result = next(iter(firsts))
    compiled.forced_bytes[state] = result
    return result


def _bit(j: int) -> int:
    return -(1 << 31) if j == 31 else 1 << j  # why: int32 bit 31 is the sign bit


def _whole_chars(data: bytes) -> str:
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""
