"""The radix tree's least-recently-used order: a heap of nodes, invalidated lazily instead of updated in place."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count
from typing import Generic, Protocol, TypeVar


class HeapNode(Protocol):
    """What the heap reads of a tree node."""

    last_access: int  # the LRU key
    heap_seqs: list[int]  # per heap (by slot): the seq of the node's one valid entry
    evicted: bool

    @property
    def is_root(self) -> bool: ...


N = TypeVar("N", bound=HeapNode)


class LRUHeap(Generic[N]):
    """Least recently used first, lazily invalidated: an entry counts while it is its node's latest (the node's
    ``heap_seqs[slot]``) and the node still qualifies."""

    def __init__(self, slot: int, qualifies: Callable[[N], bool], seq: count) -> None:
        self.slot = slot
        self.qualifies = qualifies
        self._seq = seq  # shared by the cache's heaps, so entries are unique and nodes never compared
        self._items: list[tuple[int, int, N]] = []

    def push(self, node: N, bound: int) -> None:
        """Add ``node`` if it qualifies; ``bound`` caps stale entries before a rebuild."""
        if node.is_root or not self.qualifies(node):
            return
        node.heap_seqs[self.slot] = next(self._seq)  # any older entry for this node is now stale
        heapq.heappush(self._items, (node.last_access, node.heap_seqs[self.slot], node))
        if len(self._items) > 2 * bound + 64:  # bound stale entries: rebuild from valid ones
            self._items = [e for e in self._items if self._valid(e[2], e[1])]
            heapq.heapify(self._items)

    def pop(self) -> N | None:
        """The least recently used qualifying node, or None when there is none."""
        while self._items:
            _, seq, node = heapq.heappop(self._items)
            if self._valid(node, seq):
                node.heap_seqs[self.slot] = -1
                return node
        return None

    def _valid(self, node: N, seq: int) -> bool:
        return node.heap_seqs[self.slot] == seq and not node.evicted and self.qualifies(node)
