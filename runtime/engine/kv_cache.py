"""The single owner of KV pages: the pool's free list plus the radix tree's cached prefixes.

A request's `pages` cover tokens [0, kv_len). The first `cached_len` tokens' pages belong to the tree and are
pinned by a lock on `request.node`; the rest belong to the request. Everything here keeps the invariant
free + evictable + protected == pool size whenever no request holds pages of its own.
"""

from __future__ import annotations

import numpy as np

from sprig.radix import RadixCache
from sprig.runtime.engine.request import Request
from sprig.runtime.model.kv_pool import KVPool


class KVCacheManager:
    def __init__(self, pool: KVPool, tree: RadixCache) -> None:
        self.pool = pool
        self.tree = tree
        self.page_size = pool.page_size

    # --- sizes -----------------------------------------------------------------------------------------
    @property
    def total_tokens(self) -> int:
        return self.pool.size.num_tokens

    @property
    def available_tokens(self) -> int:
        """Tokens that could be handed out now: free pages plus evictable cached prefixes."""
        return self.pool.num_free_tokens + self.tree.evictable_size

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    # --- prefix matching ---------------------------------------------------------------------------------
    def match(self, req: Request, limit: int) -> int:
        """Adopt the longest cached prefix of req.fill_ids[:limit]; returns its length in tokens."""
        assert not req.pages and req.node is None
        result = self.tree.match_prefix(req.fill_ids[:limit], namespace=req.namespace)
        n = len(result.slots)
        self.tree.lock(result.node)
        req.node = result.node
        req.pages = (result.slots[:: self.page_size] // self.page_size).tolist() if n else []
        req.cached_len = req.kv_len = n
        return n

    # --- allocation ------------------------------------------------------------------------------------
    def ensure_capacity(self, req: Request, num_tokens: int) -> bool:
        """Make req.pages cover `num_tokens` tokens, evicting cached prefixes if needed; False if impossible."""
        need = self.pages_for(num_tokens) - len(req.pages)
        if need <= 0:
            return True
        if not self._make_free(need):
            return False
        pages = self.pool.alloc(need)
        assert pages is not None
        req.pages.extend(pages)
        return True

    def _make_free(self, num_pages: int) -> bool:
        short = num_pages - self.pool.num_free_pages
        if short > 0 and self.tree.evictable_size >= short * self.page_size:
            self._free_slots(self.tree.evict(short * self.page_size))
        return self.pool.num_free_pages >= num_pages

    def _free_slots(self, slots: np.ndarray) -> None:
        if len(slots):
            self.pool.free((slots[:: self.page_size] // self.page_size).tolist())

    def trim(self, req: Request) -> int:
        """Give back the pages beyond those req's computed tokens need (rejected draft positions); returns how many."""
        keep = max(self.pages_for(req.kv_len), self.pages_for(req.cached_len))
        extra = req.pages[keep:]
        if extra:
            self.pool.free(extra)
            del req.pages[keep:]
        return len(extra)

    # --- caching and release ---------------------------------------------------------------------------
    def _insert(self, req: Request) -> int:
        """Give the whole pages of computed tokens to the tree; free our duplicates. Returns aligned length."""
        p = self.page_size
        aligned = (req.kv_len // p) * p
        if self.tree.disable:
            return -1
        if aligned <= req.cached_len:
            return req.cached_len
        pages = np.asarray(req.pages[: aligned // p], dtype=np.int64)
        slots = (pages[:, None] * p + np.arange(p)).reshape(-1)
        already = self.tree.insert(req.fill_ids[:aligned], slots, namespace=req.namespace)
        # Pages the tree already had in [cached_len, already) are duplicates of ours.
        dup = req.pages[req.cached_len // p : already // p]
        self.pool.free(dup)
        return aligned

    def cache_unfinished(self, req: Request) -> None:
        """Share a running request's computed prefix with others (after a prefill chunk)."""
        aligned = self._insert(req)
        if aligned < 0 or aligned <= req.cached_len:
            return
        result = self.tree.match_prefix(req.fill_ids[:aligned], namespace=req.namespace)
        assert len(result.slots) == aligned
        assert req.node is not None  # a running request holds a lock on its cached prefix
        self.tree.lock(result.node)
        self.tree.unlock(req.node)
        req.node = result.node
        tree_pages = (result.slots[:: self.page_size] // self.page_size).tolist()
        req.pages = tree_pages + req.pages[aligned // self.page_size :]
        req.cached_len = aligned

    def release(self, req: Request, cache: bool = True) -> None:
        """Drop everything req holds; its computed whole pages go to the tree first when `cache`."""
        p = self.page_size
        if req.node is None:
            return
        aligned = self._insert(req) if cache else -1
        if aligned < 0:
            self.pool.free(req.pages[req.cached_len // p :])
        else:
            self.pool.free(req.pages[aligned // p :])
        self.tree.unlock(req.node)
        req.node = None
        req.pages = []
        req.kv_len = req.cached_len = 0

    def flush(self) -> None:
        """Empty the tree (only when no request holds pages)."""
        self._free_slots(self.tree.evict(self.tree.total_size))
        self.tree.reset()
