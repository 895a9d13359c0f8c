"""Running token counts for the frequency, presence and repetition penalties.

A request that asks for penalties keeps a `TokenHistory`: the distinct ids it generated with their counts, and the
distinct ids of prompt + output, each grown by one token per step (amortized O(1)). The sampler's per-step penalty
tensors are then a concatenation of these arrays instead of a rebuild of the whole prompt + output history.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_INITIAL = 16


class TokenCounts:
    """Distinct token ids in first-seen order with how often each occurred."""

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._pos: dict[int, int] = {}
        self._ids = np.zeros(_INITIAL, dtype=np.int64)
        self._counts = np.zeros(_INITIAL, dtype=np.float32)
        self._n = 0
        for token in ids:
            self.add(token)

    def add(self, token: int) -> None:
        i = self._pos.get(token)
        if i is None:
            if self._n == len(self._ids):  # why: doubling keeps appends amortized O(1)
                self._ids = np.resize(self._ids, 2 * self._n)
                self._counts = np.resize(self._counts, 2 * self._n)
            i = self._n
            self._pos[token] = i
            self._ids[i] = token
            self._counts[i] = 0.0
            self._n += 1
        self._counts[i] += 1.0

    @property
    def ids(self) -> np.ndarray:
        """int64 [distinct] (a view: valid until the next `add`)."""
        return self._ids[: self._n]

    @property
    def counts(self) -> np.ndarray:
        """float32 [distinct], aligned with `ids`."""
        return self._counts[: self._n]

    def __len__(self) -> int:
        return self._n


class TokenHistory:
    """What the penalties of one request read: generated ids with counts, and every id seen in prompt or output."""

    def __init__(self, prompt_ids: Iterable[int], output_ids: Iterable[int] = ()) -> None:
        self.output = TokenCounts()
        self.seen = TokenCounts(prompt_ids)
        for token in output_ids:
            self.add_output(token)

    def add_output(self, token: int) -> None:
        self.output.add(token)
        self.seen.add(token)
