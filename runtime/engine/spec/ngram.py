"""Prompt-lookup proposals: find the request's latest earlier occurrence of its own suffix and copy what followed.

Each request keeps one index per n-gram length: n-gram → the position right after its latest occurrence. The
index grows with the request's tokens (amortized O(max n) per new token), so a lookup costs a few dict probes
whatever the length. The longest matching suffix wins; a copy that runs into the present continues with the
period it implies (a loop `A B A B` proposes `A B A B ...`), which is what a looping output does next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sprig.runtime.engine.request import Request


@dataclass
class NgramIndex:
    """Positions of the n-grams of one token sequence, for n in [min_n, max_n]."""

    min_n: int
    max_n: int
    indexed: int = 0  # every n-gram followed by a token before position `indexed` is recorded
    tables: dict[int, dict[tuple[int, ...], int]] = field(default_factory=dict)

    def update(self, tokens: list[int]) -> None:
        """Record the n-grams of tokens added since the last call (each n-gram with the token that follows it)."""
        if len(tokens) < self.indexed:  # why: the sequence was rewritten (never by the engine); start again
            self.indexed, self.tables = 0, {}
        for n in range(self.min_n, self.max_n + 1):
            table = self.tables.setdefault(n, {})
            for end in range(max(self.indexed, n), len(tokens)):  # the n-gram tokens[end-n:end] is followed by end
                table[tuple(tokens[end - n : end])] = end
        self.indexed = len(tokens)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the longest earlier occurrence of the sequence's suffix ([] if none)."""
        total = len(tokens)
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            start = self.tables.get(n, {}).get(tuple(tokens[total - n :]))
            if start is None or start >= total:
                continue
            period = total - start  # the copy repeats with this period once it reaches the present
            return [tokens[start + j] if start + j < total else tokens[start + (j % period)] for j in range(k)]
        return []


class NgramProposer:
    """Per-request n-gram indexes over prompt + output; proposes without any model."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n
        self._indexes: dict[str, NgramIndex] = {}

    def propose(self, rid: str, tokens: list[int], k: int) -> list[int]:
        """Draft tokens continuing `tokens` (the request's prompt + output), at most k."""
        index = self._indexes.get(rid)
        if index is None:
            index = self._indexes[rid] = NgramIndex(self.min_n, self.max_n)
        index.update(tokens)
        return index.propose(tokens, k)

    def propose_batch(self, reqs: Sequence[Request], ks: Sequence[int]) -> list[list[int]]:
        """`propose` for each request over its prompt + output."""
        return [self.propose(req.rid, req.fill_ids, k) for req, k in zip(reqs, ks, strict=True)]

    def release(self, rid: str) -> None:
        """Forget a request that left."""
        self._indexes.pop(rid, None)

    @property
    def num_tracked(self) -> int:
        return len(self._indexes)
