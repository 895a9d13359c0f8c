"""The per-request matcher of the llguidance backend (the default), on `GrammarMatcher`'s interface.

llguidance computes each mask for the parser state the request is in (lexer states and token-trie walks
are cached inside the compiled grammar and shared by every copy), so there is no row cache here. The
host-name A-label rule (schema/labels.py) is applied on top, as for the outlines backend.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from sprig.grammar.llg.lark import CompiledLark
from sprig.grammar.matcher import MAX_JUMP_BYTES, GrammarMatcher, check_bitmask, fill_eos_only
from sprig.grammar.schema import labels


class LlgMatcher(GrammarMatcher):
    """One request's state in an llguidance grammar (created through `compile.compiler.matcher_for`)."""

    def __init__(self, compiled: CompiledLark, max_rollback: int = 64) -> None:
        self.compiled = compiled
        self._info = compiled.tokenizer_info
        self._max_rollback = max_rollback
        self._m = compiled.new_matcher()
        self._eos = self._info.eos_token_ids
        self._terminated = False
        # (token, string scan before it)
        self._trail: deque[tuple[int, labels.StringScan]] = deque(maxlen=max_rollback)
        self._labels = labels.rules_for(compiled.spec.kind, compiled.lark, self._info)
        self._scan = labels.StringScan()

    @property
    def state(self) -> int:
        """The number of tokens accepted since the last reset (llguidance has no state ids)."""
        return len(self._trail)

    def is_terminated(self) -> bool:
        return self._terminated

    def can_finish(self) -> bool:
        return not self._terminated and self._m.is_accepting()

    def reset(self) -> None:
        self._m.reset()
        self._trail.clear()
        self._terminated = False
        self._scan = labels.StringScan()

    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        check_bitmask(bitmask)
        target = bitmask[row]
        if self._terminated or self._m.is_error():  # why: only EOS makes sense after the end
            fill_eos_only(target, self._eos)
            return
        self._m.unsafe_compute_mask_ptr(target.data_ptr(), target.numel() * 4)
        if self._labels is not None:
            self._labels.restrict(target, self._scan, self._info.token_bytes)

    def allowed_tokens(self) -> list[int]:
        row = torch.zeros((1, (self._info.vocab_size + 31) // 32), dtype=torch.int32)
        self.fill_bitmask(row, 0)
        words = row[0].tolist()
        return [t for t in range(self._info.vocab_size) if (words[t // 32] >> (t % 32)) & 1]

    def accept_token(self, token_id: int) -> bool:
        if not 0 <= token_id < self._info.vocab_size or self._terminated:
            return False
        scan = self._scan
        eos = token_id in self._eos
        if self._labels is not None and not eos:
            scan, invalid = scan.feed(self._info.token_bytes[token_id] or b"")
            if invalid:  # why: the token ends an A-label that IDNA does not allow
                return False
        if eos:  # why: try_consume_tokens never takes EOS; it is allowed exactly where the text is complete
            if not self._m.is_accepting() or not self._m.consume_token(token_id):
                return False
        elif self._m.try_consume_tokens([token_id]) != 1:
            return False
        self._trail.append((token_id, self._scan))
        self._scan = scan
        self._terminated = eos
        return True

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        if k > len(self._trail):
            raise ValueError(f"cannot roll back {k} tokens; {len(self._trail)} are kept")
        if not self._m.rollback(k):
            raise RuntimeError(f"llguidance could not roll back {k} tokens: {self._m.get_error()[:200]}")
        for _ in range(k):
            self._scan = self._trail.pop()[1]
        self._terminated = False

    def find_jump_forward_bytes(self) -> bytes:
        if self._terminated or self._m.is_accepting():  # a complete match is never forced on
            return b""
        return bytes(self._m.compute_ff_bytes()[:MAX_JUMP_BYTES])

    def _accepted_log(self) -> deque[Any]:
        return self._trail

    def _accepts_after_rollback(self, rollback: int, ids: list[int]) -> bool:
        probe = self._m.deep_copy()
        if rollback and not probe.rollback(rollback):
            return False
        return bool(probe.validate_tokens(ids) == len(ids))
