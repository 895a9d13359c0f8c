"""A bounded LRU of compiled grammars (and of compile errors), by entry count and by bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

ERROR_BYTES = 512  # why: a cached error costs little, but something, so that error storms stay bounded


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class LruCache:
    """Thread-safe LRU; `put` evicts least-recently-used entries until both limits hold."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._data: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = CacheStats()

    def get(self, key: Any) -> Any | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.stats.misses += 1
                return None
            self._data.move_to_end(key)
            self.stats.hits += 1
            return item[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        with self._lock:
            if key in self._data:
                self._bytes -= self._data.pop(key)[1]
            if nbytes > self.max_bytes or self.max_entries <= 0:
                return  # why: an entry bigger than the whole cache is served once, not kept
            self._data[key] = (value, nbytes)
            self._bytes += nbytes
            while len(self._data) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, size) = self._data.popitem(last=False)
                self._bytes -= size
                self.stats.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        return self._bytes
