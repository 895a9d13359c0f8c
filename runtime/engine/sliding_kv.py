"""Which sliding-window pages each request still reads, and which the radix tree keeps: the bookkeeping of the pool's
sliding region (`model/kv_pool.py`) for `kv_cache.py`, the one owner of KV pages.

A query at position q of a sliding layer reads keys (q - window, q]. A request's window starts at page
`first_page(kv_len)`: the pages before it are never read by it again. Each request *holds* the pages from its window
start to its end (a count per page); when its window moves past a page:

- a page of its own (not in the tree) loses its sliding page at once: nobody else can read it. So a long request's
  sliding K/V stays within ceil(window / page) + 1 pages (plus the chunk being prefilled), whatever its length;
- a tree page (a cached prefix, shared) that no request holds any more becomes *idle*: its sliding K/V stays, for a
  later request whose prefix ends there, until the sliding region runs short; then the least recently idled go first
  (`make_room`). Full-layer K/V is untouched: the tree still holds the whole prefix for the full layers.

The radix cache stays exact. A prefix hit of length L is used only up to the longest page-aligned L* <= L whose
window before it, tokens [L* - window + 1, L*), still has sliding K/V (`usable_pages`); tokens [L*, L) are prefilled
again through every layer. Recomputing only the sliding layers' K/V is not possible: a token's input to sliding layer
i depends on the sliding K/V of the window before it in layers below, which depends on the window before that, so
an exact rebuild of the window before L reaches back (sliding layers) x window tokens, in practice to the start.
When a request computes again pages the tree has without sliding K/V, its fresh sliding pages move onto the tree's
(`KVPool.move_sliding`), so the next hit on that prefix is whole. This is SGLang's choice (tombstoned nodes, a match
cut where fewer than `window` tokens of sliding K/V precede it), kept out of the tree: the pool's map is what says
which tree pages still have sliding K/V.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from sprig.runtime.engine.request import Request
from sprig.runtime.model.kv_pool import KVPool, SlidingPages


class SlidingWindowKV:
    """Holds, idles and releases the sliding pages of a pool with a sliding region."""

    def __init__(self, pool: KVPool) -> None:
        assert pool.sliding is not None  # built only for a pool with a sliding region
        self.pool = pool
        self.region: SlidingPages = pool.sliding
        self.window = self.region.window
        self.page_size = pool.page_size
        self._holders = np.zeros(pool.size.num_pages, dtype=np.int32)  # requests holding each page's sliding K/V
        self._idle: OrderedDict[int, None] = OrderedDict()  # tree pages with sliding K/V nobody holds, oldest first
        self._window_start: dict[str, int] = {}  # request id -> first page its window still reads

    # --- sizes ---------------------------------------------------------------------------------------------------
    @property
    def held_pages(self) -> int:
        """Sliding pages in use: held by requests or kept idle by the tree."""
        return self.region.spec.num_pages - self.region.num_free_pages

    @property
    def idle_pages(self) -> int:
        return len(self._idle)

    def first_page(self, position: int) -> int:
        """The first page a query at `position` reads in a sliding layer."""
        return max(0, position - self.window + 1) // self.page_size

    # --- prefix hits ---------------------------------------------------------------------------------------------
    def usable_pages(self, pages: list[int]) -> int:
        """How many of a cached prefix's pages can be used: the most k such that the window before token k * page
        has its sliding K/V (0 always can)."""
        present = self.pool.has_sliding(pages)
        if present.all():
            return len(pages)
        last_missing = np.maximum.accumulate(np.where(present, -1, np.arange(len(pages))))
        ks = np.arange(1, len(pages) + 1)
        first = np.maximum(ks * self.page_size - self.window + 1, 0) // self.page_size
        # the last missing page before k must come before the first page the query at k * page reads
        ok = np.flatnonzero(last_missing < first)
        return int(ks[ok[-1]]) if len(ok) else 0

    # --- a request's window ----------------------------------------------------------------------------------------
    def adopt(self, req: Request) -> None:
        """A request starts from its cached prefix (`req.pages`, all tree pages): hold those its window reads."""
        start = self.first_page(req.kv_len)
        self._window_start[req.rid] = start
        self._hold(req.pages[start:])

    def allocated(self, pages: list[int]) -> None:
        """New pages of a request's own: held by it."""
        self._hold(pages)

    def advance(self, req: Request) -> None:
        """Let go of the pages before the window of the request's next token (at `req.kv_len`)."""
        start = self._window_start.get(req.rid, 0)
        new_start = min(self.first_page(req.kv_len), len(req.pages))
        if new_start <= start:
            return
        tree_end = req.cached_len // self.page_size
        self._let_go(req.pages[start : min(new_start, tree_end)], in_tree=True)
        self._let_go(req.pages[max(start, tree_end) : new_start], in_tree=False)
        self._window_start[req.rid] = new_start

    def cached(self, req: Request, old_pages: list[int], from_page: int) -> None:
        """The request's pages from `from_page` on became the tree's (`req.pages` now, `old_pages` before): where the
        tree had its own copy, the request holds that one instead (its own was freed)."""
        start = self._window_start.get(req.rid, 0)
        for i in range(max(start, from_page), min(len(old_pages), len(req.pages))):
            if req.pages[i] != old_pages[i]:
                self._hold([req.pages[i]])

    def end(self, req: Request) -> None:
        """The request leaves: every page it holds is let go as a tree page (its own ones are freed or inserted
        into the tree right after, and a freed page is `forget`-ten)."""
        start = self._window_start.pop(req.rid, None)
        if start is not None:
            self._let_go(req.pages[start:], in_tree=True)

    # --- pages ---------------------------------------------------------------------------------------------------
    def received(self, pages: list[int]) -> None:
        """Tree pages that just got sliding K/V (`KVPool.move_sliding`): idle unless held."""
        for p in pages:
            if self._holders[p] == 0:
                self._idle[p] = None

    def forget(self, pages: list[int]) -> None:
        """Pages about to be freed: no holders, not idle."""
        for p in pages:
            self._holders[p] = 0
            self._idle.pop(p, None)

    def make_room(self, num_pages: int) -> bool:
        """Release idle tree pages' sliding K/V, oldest first, until `num_pages` sliding pages are free."""
        short = num_pages - self.region.num_free_pages
        if short > 0:
            drop = [self._idle.popitem(last=False)[0] for _ in range(min(short, len(self._idle)))]
            self.pool.drop_sliding(drop)
        return self.region.num_free_pages >= num_pages

    def _hold(self, pages: list[int]) -> None:
        for p in pages:
            self._holders[p] += 1
            self._idle.pop(p, None)

    def _let_go(self, pages: list[int], in_tree: bool) -> None:
        for p in pages:
            self._holders[p] -= 1
            if self._holders[p] > 0:
                continue
            if in_tree:
                if self.pool.has_sliding([p])[0]:
                    self._idle[p] = None
            else:
                self.pool.drop_sliding([p])
