"""The per-request matcher of the outlines backend: a walk through the compiled token automaton.

Rows are written by outlines-core in native code (no Python loop over the vocabulary on the decode path)
and cached per grammar state, since a state allowing most of a large vocabulary takes milliseconds to write
and is revisited by every request. Matchers start after the leading NUL sentinel (`automaton.py`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from outlines_core import Guide

from sprig.grammar.matcher import MAX_JUMP_BYTES, GrammarMatcher, check_bitmask, fill_eos_only
from sprig.grammar.outlines.automaton import CompiledGrammar
from sprig.grammar.schema import labels

MAX_ROW_CACHE_BYTES = 16 << 20  # per compiled grammar: finished bitmask rows, reused by every request


class OutlinesMatcher(GrammarMatcher):
    """One request's state in an outlines-core automaton (created through `compile.compiler.matcher_for`)."""

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
        return self._guide.is_finished()

    def can_finish(self) -> bool:
        return not self.is_terminated() and self._index.get_next_state(self.state, self._eos[0]) is not None

    def reset(self) -> None:
        self._guide.reset()
        self._guide.advance(self._eos[0], return_tokens=False)
        self._history.clear()
        self._scan = labels.StringScan()

    # ---- masks ----
    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        check_bitmask(bitmask)
        target = bitmask[row]
        if self.is_terminated():  # why: only EOS makes sense after the end; never an all-false row
            fill_eos_only(target, self._eos)
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
        return [] if self.is_terminated() else sorted(self._index.get_allowed_tokens(self.state))

    # ---- advancing ----
    def accept_token(self, token_id: int) -> bool:
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

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        if k > len(self._history):
            raise ValueError(f"cannot roll back {k} tokens; {len(self._history)} are kept")
        self._guide.rollback_state(k)
        for _ in range(k):
            self._scan = self._history.pop()[2]

    # ---- jump-forward ----
    def find_jump_forward_bytes(self) -> bytes:
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

    def _accepted_log(self) -> deque[Any]:
        return self._history

    def _accepts_after_rollback(self, rollback: int, ids: list[int]) -> bool:
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
