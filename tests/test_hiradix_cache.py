"""Behaviour of the radix tree over a host KV tier (sprig.radix.HiRadixCache on a real HostKVPool).

Each test's "KV" is real pool memory: a token's slot holds the token id, so a prefix that comes back from the
host tier can be checked against its tokens. The stateful test at the end runs random serve / lock / evict
sequences and checks that every match returns the right KV and that no device or host slot is lost or owned
twice.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sprig.kernels.kv_quant import KVCacheDtype
from sprig.radix import HiRadixCache, MatchResult, Residency, TreeNode
from sprig.runtime.engine.host_tier import FallbackReason, HiCacheCounters, HostTier
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.host_kv_pool import HostBackend, HostKVPool, HostPoolSpec
from sprig.runtime.model.kv_pool import KVPool, PoolSize, page_slots, slot_pages

PAGE = 2


class Tiers:
    """A device pool, a host tier and the tree over them, wired as the engine wires them."""

    def __init__(self, device_pages: int, host_pages: int, page_size: int = PAGE,
                 kv: KVCacheDtype = KVCacheDtype.AUTO, spec: HostPoolSpec | None = None) -> None:
        cfg = load_model_config(checkpoint_path("tiny-llama"))
        self.page_size = page_size
        self.pool = KVPool(cfg, PoolSize(device_pages, page_size), torch.float32, kv_cache_dtype=kv)
        self.counters = HiCacheCounters()
        self.host = HostTier(HostKVPool(self.pool, spec or HostPoolSpec(host_pages)), self.counters)
        self.tree = HiRadixCache(self.host, page_size)
        self.kv = KVCacheManager(self.pool, self.tree, self.host, counters=self.counters)

    def compute(self, tokens: list[int]) -> np.ndarray | None:
        """Allocate slots for `tokens` (evicting LRU prefixes) and write each token's KV: its id."""
        pages = self.alloc(len(tokens) // self.page_size)
        if pages is None:
            return None
        slots = page_slots(pages, self.page_size)
        self.pool.buffer[:, :, torch.from_numpy(slots)] = torch.tensor(tokens, dtype=torch.float32)[:, None, None]
        return slots

    def alloc(self, num_pages: int) -> list[int] | None:
        short = num_pages - self.pool.num_free_pages
        if short > 0:
            self.free(self.tree.evict(short * self.page_size))
        return self.pool.alloc(num_pages)

    def free(self, slots: np.ndarray) -> None:
        self.pool.free(slot_pages(slots, self.page_size))

    def load(self, result: MatchResult) -> np.ndarray | None:
        """The engine's load of a host hit: the slots of the whole match, or None when the device had no room."""
        loaded = self.kv.load(result) if result.host_len else result
        return None if loaded.host_len else loaded.slots

    def kv_of(self, slots: np.ndarray) -> list[int]:
        return self.pool.buffer[0, 0, torch.from_numpy(slots), 0, 0].to(torch.int64).tolist()


def doc(first: int, n: int = 8) -> list[int]:
    return list(range(first, first + n))


def cached(tiers: Tiers, tokens: list[int]) -> None:
    slots = tiers.compute(tokens)
    assert slots is not None
    assert tiers.tree.insert(tokens, slots) == 0


# ---------------------------------------------------------------- the two tiers


def test_an_evicted_prefix_moves_to_the_host_tier_and_still_matches() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    freed = tiers.tree.evict(8)
    assert len(freed) == 8
    assert tiers.tree.total_size == 0 and tiers.tree.host_size == 8
    result = tiers.tree.match_prefix(doc(100) + [7])
    assert len(result.slots) == 0 and result.host_len == 8
    assert result.host_node is not None and result.host_node.residency is Residency.HOST
    assert tiers.counters.offloaded_tokens == 8 and tiers.counters.offload_bytes > 0


def test_a_loaded_prefix_holds_its_original_kv_on_both_tiers() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    tiers.pool.buffer.zero_()  # the device copy is gone for good
    slots = tiers.load(tiers.tree.match_prefix(doc(100)))
    assert slots is not None and tiers.kv_of(slots) == doc(100)
    result = tiers.tree.match_prefix(doc(100))
    assert result.host_len == 0 and result.node.residency is Residency.BOTH
    assert tiers.tree.evictable_size == 8 and tiers.counters.loaded_tokens == 8


def test_evicting_a_node_that_kept_its_host_copy_copies_nothing() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    tiers.load(tiers.tree.match_prefix(doc(100)))
    tiers.free(tiers.tree.evict(8))
    assert tiers.counters.offloaded_tokens == 8  # written once, evicted twice
    assert tiers.tree.match_prefix(doc(100)).host_len == 8


def test_a_partial_match_splits_host_only_nodes_too() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    result = tiers.tree.match_prefix(doc(100, 4) + [1, 2])
    assert result.host_len == 4
    slots = tiers.load(result)
    assert slots is not None and tiers.kv_of(slots) == doc(100, 4)
    assert tiers.tree.match_prefix(doc(100)).host_len == 4  # the rest is still on the host only


def test_host_tier_lru_drops_the_least_recently_used_prefix() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)  # room for two 8-token documents on the host
    for first in (100, 200, 300):
        cached(tiers, doc(first))
        tiers.free(tiers.tree.evict(8))
        tiers.tree.match_prefix(doc(100))  # document 100 stays recently used
    assert tiers.tree.match_prefix(doc(100)).host_len == 8
    assert tiers.tree.match_prefix(doc(200)).host_len == 0  # the oldest went
    assert tiers.tree.match_prefix(doc(300)).host_len == 8
    assert tiers.tree.host_size == 16 and tiers.host.num_free_tokens == 0


def test_a_full_host_tier_falls_back_to_dropping_with_a_reason() -> None:
    tiers = Tiers(device_pages=8, host_pages=2)  # 4 host tokens: an 8-token node never fits
    cached(tiers, doc(100))
    freed = tiers.tree.evict(8)
    assert len(freed) == 8 and tiers.tree.num_nodes == 0  # dropped, as without a tier
    assert tiers.counters.fallbacks[FallbackReason.HOST_FULL] == 1
    assert tiers.tree.match_prefix(doc(100)).host_len == 0


def test_a_locked_path_keeps_its_host_copy_under_host_pressure() -> None:
    tiers = Tiers(device_pages=8, host_pages=4)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    loading = tiers.tree.match_prefix(doc(100))
    assert loading.host_node is not None
    tiers.tree.lock(loading.host_node)  # a load in progress
    cached(tiers, doc(200))
    tiers.free(tiers.tree.evict(8))  # the host is full of the locked path: this one is dropped
    assert tiers.counters.fallbacks[FallbackReason.HOST_FULL] == 1
    tiers.tree.unlock(loading.host_node)
    assert tiers.tree.match_prefix(doc(100)).host_len == 8


def test_an_insert_over_host_only_nodes_takes_the_new_slots_as_their_device_copy() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    tokens = doc(100) + doc(500, 4)
    slots = tiers.compute(tokens)  # a request that recomputed the document instead of loading it
    assert slots is not None
    assert tiers.tree.insert(tokens, slots) == 0  # nothing was on the device: the caller frees no duplicates
    result = tiers.tree.match_prefix(tokens)
    assert result.slots.tolist() == slots.tolist() and result.host_len == 0
    assert tiers.tree.total_size == 12 and tiers.tree.host_size == 8


def test_offload_moves_a_swapped_out_path_to_the_host_now() -> None:
    tiers = Tiers(device_pages=12, host_pages=12)
    shared = doc(100, 4)
    cached(tiers, shared)
    mine = shared + doc(900, 8)
    slots = tiers.compute(mine)
    assert slots is not None
    tiers.tree.insert(mine, slots)
    tiers.free(slots[:4])  # duplicates of the shared prefix
    node = tiers.tree.match_prefix(mine).node
    freed = tiers.tree.offload(node, min_depth=4)
    assert len(freed) == 8 and tiers.tree.total_size == 4  # the shared prefix stays on the device
    result = tiers.tree.match_prefix(mine)
    assert len(result.slots) == 4 and result.host_len == 8


def test_reset_empties_both_tiers() -> None:
    tiers = Tiers(device_pages=8, host_pages=8)
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    cached(tiers, doc(200))
    tiers.free(tiers.tree.clear())
    assert tiers.tree.num_nodes == 0 and tiers.tree.host_size == 0
    assert tiers.host.num_free_tokens == 16 and tiers.pool.num_free_pages == 8


@pytest.mark.parametrize("kv", [KVCacheDtype.INT8, KVCacheDtype.FP8_E4M3])
def test_quantized_pages_travel_byte_for_byte(kv: KVCacheDtype) -> None:
    tiers = Tiers(device_pages=8, host_pages=8, kv=kv)
    pool = tiers.pool
    assert pool.scales is not None
    gen = torch.Generator().manual_seed(0)
    raw = pool.buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
    pool.scales.copy_(torch.rand(pool.scales.shape, generator=gen).to(pool.scales.dtype))
    codes, scales = raw.clone(), pool.scales.clone()
    host = tiers.host.pool
    host.save([1, 3], [0, 5])
    host.load([0, 5], [6, 2])
    page = [slice(p * PAGE, (p + 1) * PAGE) for p in range(8)]
    for src, dst in ((1, 6), (3, 2)):
        assert torch.equal(raw[:, :, page[dst]], codes[:, :, page[src]])
        assert torch.equal(pool.scales[:, :, page[dst]], scales[:, :, page[src]])


def test_the_file_backend_maps_an_unlinked_file(tmp_path) -> None:
    tiers = Tiers(device_pages=8, host_pages=8, spec=HostPoolSpec(8, HostBackend.FILE, tmp_path))
    cached(tiers, doc(100))
    tiers.free(tiers.tree.evict(8))
    tiers.pool.buffer.zero_()
    slots = tiers.load(tiers.tree.match_prefix(doc(100)))
    assert slots is not None and tiers.kv_of(slots) == doc(100)
    assert list(tmp_path.iterdir()) == []  # no file outlives the pool


# ---------------------------------------------------------------- random operation sequences

DEVICE_PAGES, HOST_PAGES = 10, 14


def all_nodes(tree: HiRadixCache) -> list[TreeNode]:
    return tree._nodes()


class HiRadixInvariants(RuleBasedStateMachine):
    """Serve, lock, unlock, evict and swap at random; every match's KV is its tokens, and no slot leaks."""

    def __init__(self) -> None:
        super().__init__()
        self.tiers = Tiers(DEVICE_PAGES, HOST_PAGES)
        self.locks: list[TreeNode] = []

    def tokens(self, data: st.DataObject) -> list[int]:
        pages = data.draw(st.lists(st.sampled_from([(1, 2), (1, 3), (4, 5), (6, 6)]), min_size=1, max_size=6))
        return [t for page in pages for t in page]

    def match_and_check(self, tokens: list[int]) -> tuple[TreeNode, np.ndarray] | None:
        result = self.tiers.tree.match_prefix(tokens)
        slots = self.tiers.load(result)
        if slots is None:
            return None
        assert self.tiers.kv_of(slots) == tokens[: len(slots)]
        node = result.host_node if result.host_len else result.node
        assert node is not None
        return node, slots

    @rule(data=st.data())
    def serve_request(self, data: st.DataObject) -> None:
        """Match (loading host hits), lock, compute the rest, insert, unlock: the engine's path."""
        tokens = self.tokens(data)
        matched = self.match_and_check(tokens)
        if matched is None:
            return
        node, prefix = matched
        self.tiers.tree.lock(node)
        rest = tokens[len(prefix) :]
        new = self.tiers.compute(rest) if rest else np.empty(0, dtype=np.int64)
        if new is not None:
            already = self.tiers.tree.insert(tokens, np.concatenate([prefix, new]))
            assert already >= len(prefix)
            self.tiers.free(new[: already - len(prefix)])
        self.tiers.tree.unlock(node)

    @rule(data=st.data())
    def lock(self, data: st.DataObject) -> None:
        matched = self.match_and_check(self.tokens(data))
        if matched is not None:
            self.tiers.tree.lock(matched[0])
            self.locks.append(matched[0])

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        self.tiers.tree.unlock(self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1))))

    @rule(n=st.integers(0, DEVICE_PAGES * PAGE))
    def evict(self, n: int) -> None:
        self.tiers.free(self.tiers.tree.evict(n))

    @rule(data=st.data())
    def swap_out(self, data: st.DataObject) -> None:
        node = self.tiers.tree.match_prefix(self.tokens(data)).node
        self.tiers.free(self.tiers.tree.offload(node, min_depth=0))

    @invariant()
    def no_slot_is_lost_or_owned_twice(self) -> None:
        tree, pool, host = self.tiers.tree, self.tiers.pool, self.tiers.host.pool
        nodes = all_nodes(tree)
        device = [int(s) for n in nodes if n.on_device for s in n.value]
        hosted = [int(s) for n in nodes if n.host_value is not None for s in n.host_value]
        assert len(set(device)) == len(device) and len(set(hosted)) == len(hosted)
        free_pages = {p for p in range(DEVICE_PAGES) if pool._is_free[p]}
        tree_pages = set(slot_pages(np.array(device, dtype=np.int64), PAGE))
        assert not free_pages & tree_pages and free_pages | tree_pages == set(range(DEVICE_PAGES))
        assert pool.num_free_pages * PAGE + len(device) == DEVICE_PAGES * PAGE
        assert host.num_free_pages * PAGE + len(hosted) == HOST_PAGES * PAGE == host.num_pages * PAGE
        assert tree.total_size == len(device) and tree.host_size == len(hosted)
        assert tree.evictable_size + tree.protected_size == tree.total_size

    @invariant()
    def device_nodes_are_closed_upwards_and_host_only_nodes_hold_a_host_copy(self) -> None:
        for node in all_nodes(self.tiers.tree):
            parent = node.parent
            assert parent is not None
            if node.on_device and parent.parent is not None:
                assert parent.on_device
            if not node.on_device:
                assert node.host_value is not None and len(node.host_value) == len(node.key)
            if not self.locks:
                assert node.lock_ref == 0


TestHiRadixInvariants = HiRadixInvariants.TestCase
TestHiRadixInvariants.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
