"""The radix tree over two KV tiers: device slots, and a larger host tier that evicted prefixes move to.

Write-back: a node's KV is copied to the host tier when it is evicted from the device (not when it is inserted),
and it keeps that host copy after a later load, so evicting it again costs no copy (``Residency.BOTH``). Nodes
whose host copy cannot be written (the tier is full of locked nodes, or the store failed) are dropped as before,
with their host-only descendants: their tokens are recomputed by whoever needs them next.

The host tier has its own LRU: it drops host copies of nodes also on the device first-come by age, and removes
host-only leaves from the tree. A lock (the reference count every path node carries) protects a node on both
tiers, which is how a load in progress keeps its nodes while it makes room on the device.

The tree still never touches KV data: the host store copies device slots out, and the pool's owner copies host
slots back in (see ``runtime/engine/kv_cache.py``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from sprig.radix.lru_heap import LRUHeap
from sprig.radix.radix_cache import MatchResult, RadixCache, TreeNode

__all__ = ["HiRadixCache", "HostStore"]


class HostStore(Protocol):
    """Where evicted KV goes: slots in a host pool, written and freed by the store."""

    @property
    def num_free_tokens(self) -> int:
        """Host slots free now."""
        ...

    def write(self, device_slots: np.ndarray) -> np.ndarray | None:
        """Copy the KV of ``device_slots`` into freshly allocated host slots and return them; None when there
        is no room or the write failed (the store records why)."""
        ...

    def free(self, host_slots: np.ndarray) -> None:
        """Give host slots back."""
        ...

    def clear(self) -> None:
        """Free every host slot (the tree was reset)."""
        ...


class HiRadixCache(RadixCache):
    """A :class:`RadixCache` whose evicted nodes move to a host tier instead of being dropped.

    Sizes inherited from :class:`RadixCache` count device tokens; ``host_size`` counts host-tier tokens.
    """

    def __init__(self, store: HostStore, page_size: int = 1) -> None:
        self.store = store
        super().__init__(page_size=page_size)

    @property
    def host_size(self) -> int:
        """Tokens whose KV the tree holds on the host tier (host-only and both)."""
        return self._host_size

    def reset(self) -> None:
        super().reset()
        self._host_heap: LRUHeap[TreeNode] = LRUHeap(1, self._is_host_evictable, self._seq)
        self._host_size = 0
        self.store.clear()

    def host_path(self, result: MatchResult) -> list[TreeNode]:
        """The host-only nodes of a match, top down: what a load must bring to the device to use it all."""
        nodes: list[TreeNode] = []
        node = result.host_node
        while node is not None and node is not result.node:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]

    def mark_loaded(self, nodes: list[TreeNode], device_slots: np.ndarray) -> None:
        """The KV of ``nodes`` (a host path, top down) was copied into ``device_slots``; they are on both tiers."""
        pos = 0
        for node in nodes:
            self._to_device(node, device_slots[pos : pos + len(node.key)].copy())
            pos += len(node.key)
        assert pos == len(device_slots)

    def offload(self, node: TreeNode, min_depth: int) -> np.ndarray:
        """Move the unlocked device leaves from ``node`` up to depth ``min_depth`` to the host tier now (a
        swapped-out request's own KV); returns the device slots freed, for the caller's pool."""
        freed: list[np.ndarray] = []
        depth = node.depth
        while node.parent is not None and depth > min_depth and self._is_device_leaf(node):
            parent = node.parent
            depth -= len(node.key)
            freed.append(node.value)
            self._evict_device_leaf(node)
            node = parent
        return np.concatenate(freed) if freed else np.empty(0, dtype=np.int64)

    # ------------------------------------------------------------------ device eviction → host tier

    def _evict_device_leaf(self, node: TreeNode) -> None:
        if node.host_value is None and not self._write_back(node):
            self._drop(node)
            return
        self._evictable_size -= len(node.key)
        node.value, node.on_device = np.empty(0, dtype=np.int64), False
        self._version += 1
        parent = node.parent
        assert parent is not None
        self._push_if_evictable(parent)  # it may have become a device leaf
        self._push_if_evictable(node)

    def _write_back(self, node: TreeNode) -> bool:
        """Copy ``node``'s KV to the host tier, making room there first; False when the store cannot."""
        self._make_host_room(len(node.key))
        host = self.store.write(node.value)
        if host is None:
            return False
        node.host_value = host
        self._host_size += len(host)
        return True

    def _drop(self, node: TreeNode) -> None:
        """Remove an unlocked node and its (host-only, unlocked) subtree, freeing their host copies."""
        for child in list(node.children.values()):
            self._drop(child)
        self._free_host_copy(node)
        self._remove_leaf(node)

    # ------------------------------------------------------------------ host eviction

    def _make_host_room(self, num_tokens: int) -> None:
        """Drop least recently used host copies until ``num_tokens`` host slots are free or none is left."""
        while self.store.num_free_tokens < num_tokens:
            node = self._host_heap.pop()
            if node is None:
                return
            self._free_host_copy(node)
            if not node.on_device:
                self._remove_leaf(node)

    def _free_host_copy(self, node: TreeNode) -> None:
        if node.host_value is not None:
            self.store.free(node.host_value)
            self._host_size -= len(node.host_value)
            node.host_value = None

    def _push_if_evictable(self, node: TreeNode) -> None:
        super()._push_if_evictable(node)
        self._host_heap.push(node, self._num_nodes)

    @staticmethod
    def _is_host_evictable(node: TreeNode) -> bool:
        """Unlocked with a host copy that can go: a device copy remains, or no descendant depends on it."""
        return node.host_value is not None and node.lock_ref == 0 and (node.on_device or not node.children)

