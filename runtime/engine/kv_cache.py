"""The single owner of KV pages: the pool's free list plus the radix tree's cached prefixes (and, with a host
tier, the loads back from it and swap preemption).

A request's `pages` cover tokens [0, kv_len). The first `cached_len` tokens' pages belong to the tree and are
pinned by a lock on `request.node`; the rest belong to the request. Everything here keeps the invariant
free + evictable + protected == pool size whenever no request holds pages of its own.
"""

from __future__ import annotations

import numpy as np

from sprig.radix import HiRadixCache, MatchResult, RadixCache
from sprig.runtime.engine.host_tier import FallbackReason, HiCacheCounters, HostTier, PreemptMode, PrefixHit
from sprig.runtime.engine.request import Request
from sprig.runtime.model.kv_pool import KVPool, page_slots, slot_pages

SWAP_MAX_TIER_SHARE = 0.25  # a swap may push out at most this share of the host tier's cached prefixes


class KVCacheManager:
    """Pages of the device pool, the radix tree over them and, when given, the host tier under the tree."""

    def __init__(self, pool: KVPool, tree: RadixCache, host: HostTier | None = None,
                 swap_min_tokens: int = 0, counters: HiCacheCounters | None = None) -> None:
        if host is not None and not isinstance(tree, HiRadixCache):
            raise ValueError("a host tier needs a HiRadixCache over it")
        self.pool = pool
        self.tree = tree
        self.host = host
        self.swap_min_tokens = swap_min_tokens
        self.counters = counters if counters is not None else HiCacheCounters()
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
    def match(self, req: Request, limit: int) -> PrefixHit:
        """Adopt the longest cached prefix of req.fill_ids[:limit], loading its host-tier part back to the
        device when there is room; returns its length by tier."""
        assert not req.pages and req.node is None
        result = self.tree.match_prefix(req.fill_ids[:limit], namespace=req.namespace)
        device = len(result.slots)
        if result.host_len and self.host is not None:
            result = self.load(result)
        n = len(result.slots)
        self.tree.lock(result.node)
        req.node = result.node
        req.pages = slot_pages(result.slots, self.page_size)
        req.cached_len = req.kv_len = n
        return PrefixHit(device, n - device)

    def count_hit(self, hit: PrefixHit) -> None:
        """Record an admitted request's prefix hit by tier."""
        self.counters.device_hit_tokens += hit.device
        self.counters.host_hit_tokens += hit.host

    def load(self, result: MatchResult) -> MatchResult:
        """Bring a match's host-only nodes to the device (evicting LRU prefixes for room); the match as it was
        when there is no room."""
        assert isinstance(self.tree, HiRadixCache) and self.host is not None and result.host_node is not None
        nodes = self.tree.host_path(result)
        host_slots = np.concatenate([n.host_value for n in nodes if n.host_value is not None])
        self.tree.lock(result.host_node)  # why: making device room may evict; the path must stay on both tiers
        room = self._make_free(len(host_slots) // self.page_size)
        pages = self.pool.alloc(len(host_slots) // self.page_size) if room else None
        if pages is None:
            self.tree.unlock(result.host_node)
            self.counters.fallback(FallbackReason.DEVICE_FULL, f"{len(host_slots)} host tokens, "
                                   f"{self.pool.num_free_tokens} device tokens free")
            return result
        device_slots = page_slots(pages, self.page_size)
        self.host.load(host_slots, device_slots)
        self.tree.mark_loaded(nodes, device_slots)
        self.tree.unlock(result.host_node)
        return MatchResult(np.concatenate([result.slots, device_slots]), result.host_node)

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
            self.pool.free(slot_pages(slots, self.page_size))

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
        slots = page_slots(req.pages[: aligned // p], p)
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
        tree_pages = slot_pages(result.slots, self.page_size)
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

    def preempt(self, req: Request) -> PreemptMode:
        """Take a running request's KV away: swapped to the host tier when that is cheaper than recomputing it,
        else freed (kept as device cache where there is no host tier). The choice is counted."""
        mode = self._preempt_mode(req)
        self.counters.preemptions[mode] += 1
        if mode is PreemptMode.RECOMPUTE:
            self.release(req, cache=self.host is None)  # why: with a tier, caching it would only write it back
            return mode
        assert isinstance(self.tree, HiRadixCache)
        p, namespace, own_from = self.page_size, req.namespace, req.cached_tokens
        computed = req.fill_ids[: (req.kv_len // p) * p]
        self.release(req, cache=True)
        node = self.tree.match_prefix(computed, namespace=namespace).node
        self._free_slots(self.tree.offload(node, min_depth=own_from))
        return mode

    def _preempt_mode(self, req: Request) -> PreemptMode:
        """Swap when there is a tier, the context is long enough to be worth a copy, and the tier is not under
        pressure: the request's own KV fits in free host slots or in a small share of the tier (write-back keeps
        the tier full of cached prefixes, which a swap, sure to be read back, may push out)."""
        if self.host is None or req.kv_len < max(self.swap_min_tokens, self.page_size):
            return PreemptMode.RECOMPUTE
        own = req.kv_len - req.cached_tokens
        fits = own <= max(self.host.num_free_tokens, int(self.host.num_tokens * SWAP_MAX_TIER_SHARE))
        return PreemptMode.SWAP if fits else PreemptMode.RECOMPUTE

    def flush(self) -> None:
        """Empty the tree and the host tier (only when no request holds pages)."""
        self._free_slots(self.tree.clear())
