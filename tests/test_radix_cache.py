"""Behaviour of the radix prefix cache (sprig.radix.RadixCache).

The unit tests read as a specification; the stateful test at the end checks random operation sequences
against a naive oracle: a dict from every cached (namespace, prefix) to the slots of its last page.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sprig.radix import MatchResult, RadixCache, TreeNode


def slots(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------- match and insert


def test_empty_cache_matches_nothing() -> None:
    cache = RadixCache()
    result = cache.match_prefix([1, 2, 3])
    assert isinstance(result, MatchResult)
    assert result.slots.dtype == np.int64 and len(result.slots) == 0
    assert result.node.parent is None  # a root
    assert cache.total_size == 0


def test_insert_then_match_returns_the_stored_slots() -> None:
    cache = RadixCache()
    assert cache.insert([1, 2, 3], slots(10, 11, 12)) == 0
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [10, 11, 12]
    assert cache.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [10, 11, 12]  # longest cached prefix
    assert cache.match_prefix([2, 3]).slots.tolist() == []  # prefixes only, not substrings
    assert cache.total_size == cache.evictable_size == 3


def test_match_inside_an_edge_splits_the_node() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    assert cache.num_nodes == 1
    result = cache.match_prefix([1, 2, 9])
    assert result.slots.tolist() == [10, 11]
    assert cache.num_nodes == 2  # [1, 2] -> [3, 4]
    assert result.node.key.tolist() == [1, 2] and result.node.depth == 2
    (lower,) = result.node.children.values()
    assert lower.key.tolist() == [3, 4] and lower.value.tolist() == [12, 13]
    assert cache.total_size == 4  # splitting moves no tokens


def test_insert_returns_the_length_already_cached_and_keeps_the_old_slots() -> None:
    cache = RadixCache()
    assert cache.insert([1, 2, 3], slots(10, 11, 12)) == 0
    # A second request computed the same prefix into its own slots 20, 21 and extended it.
    assert cache.insert([1, 2, 5, 6], slots(20, 21, 22, 23)) == 2  # caller frees its 20, 21
    assert cache.match_prefix([1, 2, 5, 6]).slots.tolist() == [10, 11, 22, 23]
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [10, 11, 12]
    assert cache.total_size == 5
    # Inserting something fully cached stores nothing.
    assert cache.insert([1, 2], slots(30, 31)) == 2
    assert cache.total_size == 5


def test_insert_copies_its_inputs() -> None:
    cache = RadixCache()
    tokens, values = np.array([1, 2, 3]), slots(10, 11, 12)
    cache.insert(tokens, values)
    tokens[:] = 0
    values[:] = 0
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [10, 11, 12]


def test_insert_rejects_mismatched_lengths() -> None:
    cache = RadixCache()
    with pytest.raises(ValueError):
        cache.insert([1, 2, 3], slots(10, 11))


# ---------------------------------------------------------------- locks and eviction


def test_lock_protects_the_whole_path_from_eviction() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(10, 11, 12))
    cache.insert([1, 2, 4, 5], slots(10, 11, 13, 14))
    node = cache.match_prefix([1, 2, 3]).node
    cache.lock(node)
    assert (cache.protected_size, cache.evictable_size) == (3, 2)
    assert sorted(cache.evict(100).tolist()) == [13, 14]  # only the unlocked branch goes
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [10, 11, 12]
    cache.unlock(node)
    assert (cache.protected_size, cache.evictable_size) == (0, 3)
    assert sorted(cache.evict(100).tolist()) == [10, 11, 12]
    assert cache.total_size == 0


def test_locks_are_counted() -> None:
    cache = RadixCache()
    cache.insert([1, 2], slots(10, 11))
    node = cache.match_prefix([1, 2]).node
    cache.lock(node)
    cache.lock(node)
    cache.unlock(node)
    assert cache.evict(10).tolist() == []  # still locked once
    cache.unlock(node)
    assert cache.evict(10).tolist() == [10, 11]
    with pytest.raises(RuntimeError):
        cache.unlock(node)  # evicted


def test_unlock_without_lock_is_an_error() -> None:
    cache = RadixCache()
    cache.insert([1], slots(10))
    with pytest.raises(RuntimeError):
        cache.unlock(cache.match_prefix([1]).node)


def test_lock_of_a_root_is_a_no_op() -> None:
    cache = RadixCache()
    root = cache.match_prefix([7]).node
    cache.lock(root)
    cache.unlock(root)
    assert cache.protected_size == 0


def test_split_keeps_locks_balanced() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    node = cache.match_prefix([1, 2, 3, 4]).node
    cache.lock(node)
    cache.match_prefix([1, 2])  # splits the locked node; the upper half inherits the lock
    assert cache.protected_size == 4 and cache.num_nodes == 2
    cache.unlock(node)
    assert (cache.protected_size, cache.evictable_size) == (0, 4)


def test_evict_frees_least_recently_used_leaves_first() -> None:
    cache = RadixCache()
    cache.insert([1, 1], slots(10, 11))
    cache.insert([2, 2], slots(20, 21))
    cache.insert([3, 3], slots(30, 31))
    cache.match_prefix([1, 1])  # [1, 1] is now the most recent; [2, 2] the least
    assert cache.evict(1).tolist() == [20, 21]  # whole leaves: frees >= the request
    assert cache.evict(2).tolist() == [30, 31]
    assert cache.evict(2).tolist() == [10, 11]
    assert cache.evict(2).tolist() == []  # nothing left


def test_evict_stops_once_enough_is_freed() -> None:
    cache = RadixCache()
    for i in range(5):
        cache.insert([i, i], slots(10 * i, 10 * i + 1))
    assert len(cache.evict(3)) == 4
    assert cache.total_size == 6
    assert len(cache.evict(0)) == 0


def test_a_parent_left_childless_becomes_evictable() -> None:
    cache = RadixCache()
    cache.insert([1, 2], slots(10, 11))
    cache.insert([1, 2, 3], slots(10, 11, 12))  # child [3] under [1, 2]
    cache.insert([5], slots(50))
    cache.match_prefix([5])
    # The leaf [3] goes first (oldest); then its parent [1, 2] is a leaf and older than [5].
    assert cache.evict(1).tolist() == [12]
    assert cache.evict(1).tolist() == [10, 11]
    assert cache.evict(1).tolist() == [50]


def test_insert_refreshes_lru() -> None:
    cache = RadixCache()
    cache.insert([1], slots(10))
    cache.insert([2], slots(20))
    cache.insert([1], slots(99))  # touches [1]
    assert cache.evict(1).tolist() == [20]


# ---------------------------------------------------------------- namespaces


def test_namespaces_are_isolated() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(10, 11, 12), namespace="alice")
    assert cache.match_prefix([1, 2, 3], namespace="bob").slots.tolist() == []
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == []  # "" is a namespace too
    assert cache.insert([1, 2, 3], slots(20, 21, 22), namespace="bob") == 0  # bob computes his own
    assert cache.match_prefix([1, 2, 3], namespace="alice").slots.tolist() == [10, 11, 12]
    assert cache.match_prefix([1, 2, 3], namespace="bob").slots.tolist() == [20, 21, 22]
    assert cache.total_size == 6  # sizes count every namespace
    assert sorted(cache.evict(100).tolist()) == [10, 11, 12, 20, 21, 22]


# ---------------------------------------------------------------- pages


def test_page_size_matches_whole_pages_only() -> None:
    cache = RadixCache(page_size=4)
    cache.insert(list(range(8)), np.arange(100, 108))
    assert len(cache.match_prefix(list(range(7))).slots) == 4  # the partial second page does not count
    assert len(cache.match_prefix(list(range(3))).slots) == 0
    assert len(cache.match_prefix([0, 1, 2, 3, 4, 5, 6, 99]).slots) == 4  # mismatch inside page 2
    assert cache.match_prefix(list(range(9))).slots.tolist() == list(range(100, 108))


def test_page_size_splits_on_page_boundaries() -> None:
    cache = RadixCache(page_size=4)
    cache.insert(list(range(12)), np.arange(100, 112))
    result = cache.match_prefix([0, 1, 2, 3, 4, 5, 99, 99])
    assert result.slots.tolist() == [100, 101, 102, 103]
    assert len(result.node.key) == 4 and cache.num_nodes == 2
    # Diverging inside the second page stores the whole new page; the shared first page is reused.
    assert cache.insert([0, 1, 2, 3, 4, 5, 99, 99], np.arange(200, 208)) == 4
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 99, 99]).slots.tolist() == [
        100,
        101,
        102,
        103,
        204,
        205,
        206,
        207,
    ]


def test_page_size_insert_must_be_whole_pages() -> None:
    cache = RadixCache(page_size=4)
    with pytest.raises(ValueError):
        cache.insert([1, 2, 3], slots(1, 2, 3))


# ---------------------------------------------------------------- disable and reset


def test_disabled_cache_stores_and_matches_nothing() -> None:
    cache = RadixCache(disable=True)
    assert cache.insert([1, 2, 3], slots(10, 11, 12)) == 0  # the caller frees all three
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == []
    assert cache.total_size == 0 and cache.evict(10).tolist() == []
    cache.lock(cache.match_prefix([1]).node)  # harmless
    assert cache.protected_size == 0


def test_reset_drops_everything_and_old_nodes_become_inert() -> None:
    cache = RadixCache()
    cache.insert([1, 2], slots(10, 11))
    node = cache.match_prefix([1, 2]).node
    cache.lock(node)
    cache.reset()
    assert cache.total_size == cache.protected_size == 0
    assert cache.match_prefix([1, 2]).slots.tolist() == []
    cache.unlock(node)  # a request that finishes after a flush: nothing to undo
    assert cache.protected_size == 0


# ---------------------------------------------------------------- stateful test against an oracle

POOL_SIZE = 24
NAMESPACES = ("", "t")
Key = tuple[str, tuple[int, ...]]


class RadixAgainstOracle(RuleBasedStateMachine):
    """Drives a RadixCache the way the engine does, with a simulated slot pool and a naive oracle.

    oracle[(namespace, prefix)] = slots of the prefix's last page, for every whole-page prefix the tree
    holds (with page_size 1: the slot of its last token).
    """

    page_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.cache = RadixCache(page_size=self.page_size)
        self.free: list[int] = list(range(POOL_SIZE))
        self.oracle: dict[Key, tuple[int, ...]] = {}
        self.locks: list[tuple[TreeNode, Key]] = []  # (node, (namespace, locked prefix))

    # -- helpers

    def tokens(self, data: st.DataObject, max_pages: int) -> list[int]:
        # Tiny alphabets make prefixes collide and edges split; pages (0, 0) and (0, 1) differ mid-page.
        alphabet = [(0,), (1,)] if self.page_size == 1 else [(0, 0), (0, 1), (1, 0)]
        pages = data.draw(st.lists(st.sampled_from(alphabet), max_size=max_pages))
        return [t for page in pages for t in page]

    def oracle_match(self, ns: str, tokens: list[int]) -> list[int]:
        """Slots of the longest cached whole-page prefix of ``tokens``."""
        out: list[int] = []
        end = self.page_size
        while end <= len(tokens) and (ns, tuple(tokens[:end])) in self.oracle:
            out += self.oracle[(ns, tuple(tokens[:end]))]
            end += self.page_size
        return out

    def oracle_add(self, ns: str, tokens: list[int], values: list[int], start: int) -> None:
        """Record that the tree now holds ``tokens[start:]`` in ``values[start:]``."""
        for end in range(start + self.page_size, len(tokens) + 1, self.page_size):
            self.oracle[(ns, tuple(tokens[:end]))] = tuple(values[end - self.page_size : end])

    def locked_keys(self) -> set[Key]:
        return {
            (ns, path[:end])
            for _, (ns, path) in self.locks
            for end in range(self.page_size, len(path) + 1, self.page_size)
        }

    def alloc(self, n: int) -> list[int] | None:
        if len(self.free) < n:
            self.do_evict(n - len(self.free))
        if len(self.free) < n:
            return None
        out, self.free = self.free[:n], self.free[n:]
        return out

    def do_evict(self, n: int) -> None:
        evictable_before = self.cache.evictable_size
        freed = self.cache.evict(n).tolist()
        assert len(set(freed)) == len(freed)
        assert len(freed) >= min(n, evictable_before)
        assert len(freed) >= n or self.cache.evictable_size == 0  # stops only when done or out of leaves
        freed_set = set(freed)
        locked = self.locked_keys()
        for key, page in list(self.oracle.items()):
            if freed_set.intersection(page):
                assert freed_set.issuperset(page)  # whole pages go
                assert key not in locked  # locked prefixes never go
                del self.oracle[key]
                freed_set.difference_update(page)
        assert not freed_set  # every freed slot was held by the tree
        self.free += freed

    def admit(self, ns: str, tokens: list[int]) -> tuple[TreeNode, list[int]]:
        """match_prefix, checked against the oracle; returns the match node and its slots."""
        result = self.cache.match_prefix(tokens, namespace=ns)
        expected = self.oracle_match(ns, tokens)
        assert result.slots.tolist() == expected
        assert result.node.depth == len(expected)
        return result.node, expected

    # -- rules

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def match(self, data: st.DataObject, ns: str) -> None:
        tokens = self.tokens(data, 8)
        if self.page_size > 1 and tokens:  # also ask with a trailing partial page
            tokens = tokens + tokens[: self.page_size - 1]
        self.admit(ns, tokens)

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def serve_request(self, data: st.DataObject, ns: str) -> None:
        """The engine path: match, lock, allocate the rest (evicting if needed), insert, unlock."""
        tokens = self.tokens(data, 8)
        node, prefix = self.admit(ns, tokens)
        self.cache.lock(node)
        self.locks.append((node, (ns, tuple(tokens[: len(prefix)]))))
        new = self.alloc(len(tokens) - len(prefix))
        if new is not None:
            values = prefix + new
            assert self.cache.insert(tokens, np.array(values), namespace=ns) == len(prefix)
            self.oracle_add(ns, tokens, values, len(prefix))
        self.locks.pop()
        self.cache.unlock(node)

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def insert_fresh(self, data: st.DataObject, ns: str) -> None:
        """A request that computed everything itself (it matched before a twin inserted the prefix)."""
        tokens = self.tokens(data, 8)
        new = self.alloc(len(tokens))
        if new is None:
            return
        expected = len(self.oracle_match(ns, tokens))
        already = self.cache.insert(tokens, np.array(new, dtype=np.int64), namespace=ns)
        assert already == expected
        self.oracle_add(ns, tokens, new, already)
        self.free += new[:already]  # the caller frees its duplicates

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def lock(self, data: st.DataObject, ns: str) -> None:
        tokens = self.tokens(data, 6)
        node, prefix = self.admit(ns, tokens)
        self.cache.lock(node)
        self.locks.append((node, (ns, tuple(tokens[: len(prefix)]))))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        node, _ = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.cache.unlock(node)

    @rule(n=st.integers(0, POOL_SIZE))
    def evict(self, n: int) -> None:
        self.do_evict(n)

    @precondition(lambda self: not self.locks)
    @rule()
    def flush(self) -> None:
        """`/flush_cache` when idle: the tree drops everything and the pool takes it all back."""
        self.cache.reset()
        self.free = list(range(POOL_SIZE))
        self.oracle.clear()

    # -- invariants

    @invariant()
    def sizes_match_the_oracle(self) -> None:
        cache = self.cache
        held = [slot for page in self.oracle.values() for slot in page]
        assert cache.total_size == len(held)
        assert cache.protected_size == self.page_size * len(self.locked_keys())
        assert cache.evictable_size + cache.protected_size == cache.total_size
        assert sorted(self.free + held) == list(range(POOL_SIZE))  # every slot is free xor in the tree
        if not self.locks:
            assert cache.protected_size == 0
            assert len(self.free) + cache.evictable_size + cache.protected_size == POOL_SIZE

    @invariant()
    def oracle_is_prefix_closed(self) -> None:
        # Eviction takes leaves only, so a cached prefix's own prefixes stay cached.
        for ns, prefix in self.oracle:
            parent = prefix[: -self.page_size]
            assert not parent or (ns, parent) in self.oracle


class RadixAgainstOraclePaged(RadixAgainstOracle):
    page_size = 2


_stateful = settings(
    max_examples=80, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRadixAgainstOracle = RadixAgainstOracle.TestCase
TestRadixAgainstOracle.settings = _stateful
TestRadixAgainstOraclePaged = RadixAgainstOraclePaged.TestCase
TestRadixAgainstOraclePaged.settings = _stateful
