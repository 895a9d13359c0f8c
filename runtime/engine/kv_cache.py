"""The single owner of KV pages: the pool's free list plus the radix tree's cached prefixes (and, with a host
tier, the loads back from it and swap preemption).

A request's `pages` cover tokens [0, kv_len). The first `cached_len` tokens' pages belong to the tree and are
pinned by a lock on `request.node`; the rest belong to the request. Everything here keeps the invariant
free + evictable + protected == pool size whenever no request holds pages of its own.

With a sliding region in the pool, `sliding_kv.py` decides which sliding pages a request still reads and which the
tree keeps; a prefix hit is cut where the window before it lacks sliding K/V (its docstring says why that is exact).
"""

from __future__ import annotations

import numpy as np

from sprig.radix import HiRadixCache, MatchResult, RadixCache
from sprig.runtime.engine.host_tier import FallbackReason, HiCacheCounters, HostTier, PreemptMode, PrefixHit
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.sliding_kv import SlidingWindowKV
from sprig.runtime.model.kv_pool import KVPool, page_slots, slot_pages

SWAP_MAX_TIER_SHARE = 0.25  # a swap may push out at most this share of the host tier's cached prefixes


class KVCacheManager:
    """Pages of the device pool, the radix tree over them and, when given, the host tier under the tree."""

    def __init__(self, pool: KVPool, tree: RadixCache, host: HostTier | None = None,
                 swap_min_tokens: int = 0, counters: HiCacheCounters | None = None) -> None:
        if host is not None and not isinstance(tree, HiRadixCache):
            raise ValueError("a host tier needs a HiRadixCache over it")
        if host is not None and pool.sliding is not None:
            raise ValueError("the host tier does not hold a sliding-window region's pages yet")
        self.pool = pool
        self.tree = tree
        self.host = host
        self.swap_min_tokens = swap_min_tokens
        self.counters = counters if counters is not None else HiCacheCounters()
        self.page_size = pool.page_size
        self.sliding = SlidingWindowKV(pool) if pool.sliding is not None else None

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
        pages = slot_pages(result.slots, self.page_size)
        if self.sliding is not None:  # why: the sliding layers need the window before the first computed token
            pages = pages[: self.sliding.usable_pages(pages)]
            device = len(pages) * self.page_size
        n = len(pages) * self.page_size
        self.tree.lock(result.node)
        req.node = result.node
        req.pages = pages
        req.cached_len = req.kv_len = n
        if self.sliding is not None:
            self.sliding.adopt(req)
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
        if self.sliding is not None:
            self.sliding.advance(req)  # the pages before the window of its next token: no longer read by it
        need = self.pages_for(num_tokens) - len(req.pages)
        if need <= 0:
            return True
        if not self._make_free(need):
            return False
        pages = self.pool.alloc(need)
        assert pages is not None
        req.pages.extend(pages)
        if self.sliding is not None:
            self.sliding.allocated(pages)
        return True

    def _make_free(self, num_pages: int) -> bool:
        short = num_pages - self.pool.num_free_pages
        if short > 0 and self.tree.evictable_size >= short * self.page_size:
            self._free_slots(self.tree.evict(short * self.page_size))
        if self.sliding is not None and not self.sliding.make_room(num_pages):
            return False
        return self.pool.num_free_pages >= num_pages

    def _free_slots(self, slots: np.ndarray) -> None:
        if len(slots):
            self._free_pages(slot_pages(slots, self.page_size))

    def _free_pages(self, pages: list[int]) -> None:
        if self.sliding is not None:
            self.sliding.forget(pages)
        self.pool.free(pages)

    def trim(self, req: Request) -> int:
        """Give back the pages beyond those req's computed tokens need (rejected draft positions); returns how many."""
        keep = max(self.pages_for(req.kv_len), self.pages_for(req.cached_len))
        extra = req.pages[keep:]
        if extra:
            self._free_pages(extra)
            del req.pages[keep:]
        return len(extra)

    def sliding_table(self, req: Request) -> np.ndarray | None:
        """The sliding region's page table for req's next step, taken now (None without a sliding region)."""
        if self.sliding is None:
            return None
        return self.pool.snapshot_sliding(req.pages, self.sliding.first_page(req.kv_len))

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
        if self.sliding is not None and dup:  # the tree's copies lacking sliding K/V take ours
            tree_pages = slot_pages(self.tree.match_prefix(req.fill_ids[:already], namespace=req.namespace).slots, p)
            self.sliding.received(self.pool.move_sliding(tree_pages[req.cached_len // p :], dup))
        self._free_pages(dup)
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
        old_pages, from_page = req.pages, req.cached_len // self.page_size
        req.pages = tree_pages + req.pages[aligned // self.page_size :]
        req.cached_len = aligned
        if self.sliding is not None:
            self.sliding.cached(req, old_pages, from_page)

    def release(self, req: Request, cache: bool = True) -> None:
        """Drop everything req holds; its computed whole pages go to the tree first when `cache`."""
        p = self.page_size
        if req.node is None:
            return
        if self.sliding is not None:
            self.sliding.end(req)
        aligned = self._insert(req) if cache else -1
        if aligned < 0:
            self._free_pages(req.pages[req.cached_len // p :])
        else:
            self._free_pages(req.pages[aligned // p :])
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
