"""The per-request matcher interface both backends implement, and the batch bitmask it fills.

One matcher per request, created from a shared compiled grammar by `compile.compiler.matcher_for`, which
picks the compiled grammar's backend (`llg/matcher.py`, `outlines/matcher.py`). The engine allocates one int32 bitmask
for the whole batch (`allocate_token_bitmask`) on the CPU, asks each constrained request to fill its row,
and applies it with `sprig.kernels.bitmask.apply_token_bitmask_`. Jump-forward (re-tokenizing the forced
text with the last output token) is the same on both backends and lives here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from sprig.grammar.vocabulary import TokenizerInfo

MAX_JUMP_BYTES = 256  # why: bounds the work (and the extend pass) of one jump-forward


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


class GrammarMatcher(ABC):
    """The state of one request inside a compiled grammar (build one with `compile.compiler.matcher_for`)."""

    compiled: Any
    _info: TokenizerInfo

    # ---- state ----
    @property
    @abstractmethod
    def state(self) -> int:
        """An id of the current state (the token count since reset where the backend has no state ids)."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """True once an EOS token has been accepted: the output is complete."""

    @abstractmethod
    def can_finish(self) -> bool:
        """True if the text so far is a complete match (EOS is allowed now)."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the start of the grammar, as if no token had been accepted."""

    # ---- masks ----
    @abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        """Write the allowed tokens of the current state into `bitmask[row]` (CPU, int32, contiguous)."""

    @abstractmethod
    def allowed_tokens(self) -> list[int]:
        """The allowed token ids of the current state (for tests and debugging; slow on big vocabularies)."""

    # ---- advancing ----
    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar does not allow it here."""

    @abstractmethod
    def rollback(self, k: int) -> None:
        """Undo the last `k` accepted tokens (at most `max_rollback`)."""

    def accept_tokens(self, token_ids: list[int] | tuple[int, ...]) -> bool:
        """Accept tokens in order; on the first refusal, undo the ones accepted here and return False."""
        for n, tok in enumerate(token_ids):
            if not self.accept_token(tok):
                self.rollback(n)
                return False
        return True

    # ---- jump-forward ----
    @abstractmethod
    def find_jump_forward_bytes(self) -> bytes:
        """The bytes every continuation of the current state starts with (empty if there is a choice)."""

    @abstractmethod
    def _accepted_log(self) -> deque[Any]:
        """The last accepted tokens, oldest first, each entry starting with its token id."""

    @abstractmethod
    def _accepts_after_rollback(self, rollback: int, ids: list[int]) -> bool:
        """Whether the grammar, `rollback` tokens back, accepts `ids`."""

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


def check_bitmask(bitmask: torch.Tensor) -> None:
    """Raise unless `bitmask` is what `fill_bitmask` writes into: a contiguous CPU int32 tensor."""
    if bitmask.dtype != torch.int32 or bitmask.device.type != "cpu" or not bitmask.is_contiguous():
        raise ValueError("bitmask must be a contiguous CPU int32 tensor")


def fill_eos_only(target: torch.Tensor, eos_token_ids: tuple[int, ...]) -> None:
    """A row allowing only the EOS ids (after the end; never an all-false row)."""
    target.zero_()
    for tok in eos_token_ids:
        target[tok // 32] |= bit(tok % 32)


def bit(j: int) -> int:
    """Bit `j` of an int32 word (bit 31 is the sign bit)."""
    return -(1 << 31) if j == 31 else 1 << j


def _whole_chars(data: bytes) -> str:
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""
