"""A reasoning request's constraint starts after its thinking: `ThinkingMatcher` (SGLang's "reasoner grammar").

While the model thinks, the request's grammar matcher is fed nothing and every token is allowed, except those whose
bytes would complete the end-of-thinking marker before their last byte (the grammar must start on a token
boundary to stay exact). Once the marker's last byte is generated, every token goes to the grammar. A thinking
budget (`max_thinking_tokens`) forces the marker's tokens, one per step through the mask, when it is reached.

The marker is matched on the tokens' bytes, not on token ids, so a model whose vocabulary spells ``</think>`` in
several tokens (or a special token that reads ``</think>``) is handled alike. The matcher keeps a log per accepted
token, so rollback (speculative drafts, jump-forward's re-tokenizing) restores the thinking state exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sprig.grammar.matcher import GrammarMatcher, JumpForward
from sprig.runtime.engine.generate_request import GenerateRequest, SamplingParams
from sprig.runtime.engine.request import Request
from sprig.runtime.errors import RequestError
from sprig.runtime.reasoning_format import ReasoningFormat


@dataclass(frozen=True)
class MarkerTokens:
    """The end-of-thinking marker against one vocabulary (built once per engine and marker).

    A state is how many bytes of the marker the text ends with (Knuth-Morris-Pratt); `rows[k]` is the bitmask row
    of state k: every token but those that would complete the marker before their last byte.
    """

    marker: bytes
    fail: tuple[int, ...]
    rows: tuple[torch.Tensor, ...]
    token_bytes: tuple[bytes | None, ...]
    by_bytes: dict[bytes, int]

    @classmethod
    def build(cls, marker: str, token_bytes: list[bytes | None], vocab_size: int) -> MarkerTokens:
        if not marker:
            raise ValueError("the end-of-thinking marker is empty")
        data = marker.encode("utf-8")
        fail = _failure(data)
        words = (vocab_size + 31) // 32
        rows = [torch.full((words,), -1, dtype=torch.int32) for _ in data]
        probe = cls(data, fail, (), tuple(token_bytes), {})
        for tok, b in enumerate(token_bytes):
            if not b or data[-1] not in b:  # why: only a token holding the marker's last byte can complete it
                continue
            for k in range(len(data)):
                _, done = probe.advance(k, b)
                if done is not None and done < len(b):
                    _clear_bit(rows[k], tok)
        by_bytes: dict[bytes, int] = {}
        for tok, b in enumerate(token_bytes):
            if b and len(b) <= len(data) and data.find(b) >= 0:
                by_bytes.setdefault(b, tok)
        return cls(data, fail, tuple(rows), tuple(token_bytes), by_bytes)

    def advance(self, k: int, data: bytes) -> tuple[int, int | None]:
        """The state after `data` from state `k`, and where the marker first completed (bytes of `data` read), if
        it did."""
        m = self.marker
        for i, byte in enumerate(data):
            while k and m[k] != byte:
                k = self.fail[k - 1]
            if m[k] == byte:
                k += 1
            if k == len(m):
                return 0, i + 1
        return k, None

    def forced(self, k: int) -> list[int]:
        """Tokens spelling the rest of the marker from state `k` (greedy: the longest token that fits, each time)."""
        rest, out = self.marker[k:], []
        while rest:
            for n in range(len(rest), 0, -1):
                tok = self.by_bytes.get(rest[:n])
                if tok is not None:
                    out.append(tok)
                    rest = rest[n:]
                    break
            else:
                raise ValueError(f"no token spells {rest!r} of the end-of-thinking marker")
        return out


def _failure(m: bytes) -> tuple[int, ...]:
    fail = [0] * len(m)
    k = 0
    for i in range(1, len(m)):
        while k and m[i] != m[k]:
            k = fail[k - 1]
        if m[i] == m[k]:
            k += 1
        fail[i] = k
    return tuple(fail)


def _clear_bit(row: torch.Tensor, tok: int) -> None:
    word = int(row[tok >> 5].item()) & 0xFFFFFFFF
    word &= ~(1 << (tok & 31)) & 0xFFFFFFFF
    row[tok >> 5] = word - (1 << 32) if word >= 1 << 31 else word


def _only(row: torch.Tensor, tok: int) -> None:
    row.zero_()
    bit = 1 << (tok & 31)
    row[tok >> 5] = bit - (1 << 32) if bit >= 1 << 31 else bit


class ThinkingMatcher:
    """Free thinking, then `inner` (a grammar matcher, or None: only the budget) from the marker on."""

    def __init__(self, inner: Any, marker: MarkerTokens, budget: int | None) -> None:
        self.inner = inner
        self.marker = marker
        self.budget = budget
        self.thinking = True
        self.k = 0  # marker bytes the thinking text ends with
        self.count = 0  # thinking tokens accepted
        self._log: list[tuple[int, int] | None] = []  # per token: (k, count) before a thinking one; None: inner's
        self._forced: list[int] | None = None  # the marker's tokens, once the budget is reached

    # ---- state ----
    def is_terminated(self) -> bool:
        return not self.thinking and self.inner is not None and self.inner.is_terminated()

    def can_finish(self) -> bool:
        return self.thinking or self.inner is None or self.inner.can_finish()

    @property
    def state(self) -> int:
        return -1 - self.count if self.thinking or self.inner is None else self.inner.state

    def reset(self) -> None:
        self.rollback(len(self._log))

    # ---- masks ----
    def _next_forced(self) -> int | None:
        if self.budget is None or self.count < self.budget:
            return None
        if self._forced is None:
            self._forced = self.marker.forced(self.k)
        return self._forced[self.count - self.budget]

    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        if not self.thinking:
            if self.inner is not None:
                self.inner.fill_bitmask(bitmask, row)
            else:
                bitmask[row].fill_(-1)
            return
        forced = self._next_forced()
        if forced is not None:
            _only(bitmask[row], forced)
        elif self.inner is not None:
            bitmask[row].copy_(self.marker.rows[self.k])
        else:
            bitmask[row].fill_(-1)

    def allowed_tokens(self) -> list[int]:
        words = self.marker.rows[0].numel()
        mask = torch.full((1, words), -1, dtype=torch.int32)
        self.fill_bitmask(mask, 0)
        bits = mask[0].tolist()
        return [w * 32 + b for w, v in enumerate(bits) for b in range(32) if (v >> b) & 1]

    # ---- advancing ----
    def accept_token(self, token_id: int) -> bool:
        if not self.thinking:
            if self.inner is not None and not self.inner.accept_token(token_id):
                return False
            self._log.append(None)
            return True
        forced = self._next_forced()
        if forced is not None and token_id != forced:
            return False
        data = self.marker.token_bytes[token_id] if token_id < len(self.marker.token_bytes) else None
        k, done = self.marker.advance(self.k, data or b"")
        if self.inner is not None and done is not None and data is not None and done < len(data):
            return False  # why: the grammar would have to start inside this token
        self._log.append((self.k, self.count))
        self.count += 1
        if done is not None:
            self.thinking, self.k = False, 0
        else:
            self.k = k
        return True

    accept_tokens = GrammarMatcher.accept_tokens  # why: the same all-or-nothing loop over accept_token

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        popped = self._log[len(self._log) - k:]
        del self._log[len(self._log) - k:]
        inner = sum(1 for entry in popped if entry is None)
        if inner and self.inner is not None:
            self.inner.rollback(inner)
        first = next((entry for entry in popped if entry is not None), None)
        if first is not None:
            self.thinking, (self.k, self.count) = True, first
            if self.budget is None or self.count < self.budget:
                self._forced = None  # why: computed from the state the budget is reached in, which may differ now

    # ---- jump-forward ----
    def find_jump_forward_tokens(self) -> JumpForward | None:
        """The grammar's forced text once thinking is over (never across the marker: the inner matcher's own log
        starts after it)."""
        if self.thinking or self.inner is None:
            return None
        return self.inner.find_jump_forward_tokens()


def starts_thinking(call: GenerateRequest, params: SamplingParams, fmt: ReasoningFormat | None) -> bool:
    """Whether a request's output starts inside thinking (`require_reasoning`, or a thinking budget); a
    RequestError naming the field when the engine has no reasoning parser to find thinking's end."""
    field = "require_reasoning" if call.require_reasoning else "max_thinking_tokens"
    if not (call.require_reasoning or params.max_thinking_tokens is not None):
        return False
    if fmt is None:
        raise RequestError(f"{field} needs a reasoning parser (--reasoning-parser)", param=field,
                           code="unsupported")
    return True


def with_thinking(req: Request, marker: Callable[[], MarkerTokens]) -> None:
    """A request whose output starts inside thinking gets its constraint, and its thinking budget, from the
    end-of-thinking marker on (`marker()` builds it against the vocabulary, once per engine)."""
    budget = req.params.max_thinking_tokens
    if req.thinking and (req.matcher is not None or budget is not None):
        req.matcher = ThinkingMatcher(req.matcher, marker(), budget)
