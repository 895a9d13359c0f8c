"""A radix tree over token ids that indexes cached KV slots (the prefix cache).

Each edge holds a run of token ids (``key``) and the KV slot indices that hold their keys/values
(``value``), one slot per token. A request asks for the longest cached prefix of its prompt
(:meth:`RadixCache.match_prefix`), locks it while it runs, and on finish inserts prompt + output
(:meth:`RadixCache.insert`) so the next request that starts the same way can reuse it. Under memory
pressure the owner of the KV pool calls :meth:`RadixCache.evict`, which drops least recently used
unlocked leaves and hands their slots back.

A node's KV may also live on a host tier (:class:`~sprig.radix.hiradix_cache.HiRadixCache`): ``residency``
says where. Nodes whose KV is on the device form a prefix of every path (eviction takes device leaves, loading
fills a path from the top), so a match's device slots are always the first part of it.

The tree never allocates or frees slots itself: it only records which slots hold which prefix.
Modelled on SGLang's ``RadixCache`` and mini-sglang's radix cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import count, takewhile

import numpy as np

from sprig.radix.lru_heap import LRUHeap

__all__ = ["MatchResult", "RadixCache", "Residency", "TreeNode"]

# Child lookup key: the first token id (page_size == 1) or the first page as a tuple.
ChildKey = int | tuple[int, ...]

_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.flags.writeable = False  # shared key/value of every root; read-only so nobody writes into it


class Residency(Enum):
    """Where a node's KV lives."""

    DEVICE = "device"
    HOST = "host"
    BOTH = "both"


@dataclass(eq=False)  # identity equality/hash: nodes are used as dict/set members and heap payloads
class TreeNode:
    """One edge of the tree: ``key`` token ids stored in KV slots ``value`` (same length while on the device)."""

    key: np.ndarray = field(default_factory=lambda: _EMPTY)
    value: np.ndarray = field(default_factory=lambda: _EMPTY)  # device slots; empty while only on the host
    parent: TreeNode | None = None
    children: dict[ChildKey, TreeNode] = field(default_factory=dict)
    lock_ref: int = 0  # number of live locks on this node or any descendant
    last_access: int = 0  # logical clock of the last match/insert through this node (LRU)
    epoch: int = 0  # RadixCache.reset() bumps the cache's epoch; older nodes are dead
    heap_seqs: list[int] = field(default_factory=lambda: [-1, -1])  # seq of the valid entry in each LRU heap
    evicted: bool = False
    on_device: bool = True  # False: `value` is empty and the KV lives only in `host_value`
    host_value: np.ndarray | None = None  # host-tier slots of the same tokens (HiRadixCache)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def depth(self) -> int:
        """Tokens from the root down to the end of this node."""
        n, node = 0, self
        while node.parent is not None:
            n += len(node.key)
            node = node.parent
        return n

    @property
    def residency(self) -> Residency:
        if not self.on_device:
            return Residency.HOST
        return Residency.DEVICE if self.host_value is None else Residency.BOTH

    @property
    def device_len(self) -> int:
        """Tokens of this edge held in device slots (all of them, or none)."""
        return len(self.key) if self.on_device else 0

    def __repr__(self) -> str:
        return f"TreeNode(len={len(self.key)}, lock_ref={self.lock_ref}, children={len(self.children)})"


@dataclass
class MatchResult:
    """Result of :meth:`RadixCache.match_prefix`."""

    slots: np.ndarray  # int64 device KV slots of the matched prefix held on the device
    node: TreeNode  # deepest node of that device part (a root if nothing matched); lock/unlock take it
    host_node: TreeNode | None = None  # deepest matched node when the match goes on into host-only nodes
    host_len: int = 0  # matched tokens after `slots` whose KV is only on the host tier


class RadixCache:
    """Prefix tree from token ids to KV slot indices, with ref-count locks and LRU eviction.

    Args:
        page_size: KV slots are allocated in pages of this many tokens; only whole pages are matched,
            inserted and split.
        disable: ``--disable-radix-cache`` mode: nothing is ever matched or stored.

    Separate ``namespace`` strings get separate trees (tenant isolation); sizes count all of them.
    Not thread-safe: one owner (the engine loop) calls it.
    """

    def __init__(self, page_size: int = 1, disable: bool = False) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.disable = disable
        self._epoch = 0
        self._version = 0
        self._seq = count()  # unique tie-breaker for heap entries, so nodes are never compared
        self.reset()

    # ------------------------------------------------------------------ sizes

    @property
    def evictable_size(self) -> int:
        """Device tokens held by the tree that no lock protects (``evict`` can free them)."""
        return self._evictable_size

    @property
    def protected_size(self) -> int:
        """Device tokens held by the tree on some locked path (``evict`` never frees them)."""
        return self._protected_size

    @property
    def total_size(self) -> int:
        """All device tokens (= device KV slots) held by the tree, over all namespaces."""
        return self._evictable_size + self._protected_size

    @property
    def version(self) -> int:
        """Changes whenever a match could return something else (insert, evict, reset), so a caller can
        reuse an earlier match of the same tokens while it is unchanged."""
        return self._version

    @property
    def num_nodes(self) -> int:
        """Number of non-root nodes, over all namespaces."""
        return self._num_nodes

    # ------------------------------------------------------------------ public API

    def reset(self) -> None:
        """Drop the whole tree (``/flush_cache``). Its slots are not returned: call this when idle and
        reset the KV pool alongside. Nodes from before the reset become inert: lock/unlock ignore them."""
        self._epoch += 1
        self._version += 1
        self._roots: dict[str, TreeNode] = {}
        self._null_root = self._new_root()  # returned by matches in namespaces that hold nothing
        self._heap: LRUHeap[TreeNode] = LRUHeap(0, self._is_device_leaf, self._seq)
        self._clock = 0
        self._evictable_size = 0
        self._protected_size = 0
        self._num_nodes = 0

    def match_prefix(self, token_ids: Sequence[int] | np.ndarray, namespace: str = "") -> MatchResult:
        """Find the longest cached prefix of ``token_ids`` (whole pages only) in ``namespace``.

        If the match ends inside an edge, that node is split so ``result.node`` ends exactly at the match.
        Every node on the path counts as used now for LRU. The slots are a fresh array the caller may keep.
        A match that goes on into nodes held only on the host tier reports them as ``host_node`` / ``host_len``.
        """
        root = self._roots.get(namespace)
        if self.disable or root is None:
            return MatchResult(_empty(), self._null_root)
        tokens = _as_int64(token_ids)
        tokens = tokens[: len(tokens) - len(tokens) % self.page_size]  # only whole pages can match
        path, matched = self._walk(root, tokens, self._tick())
        device = _device_part(path)
        slots = np.concatenate([n.value for n in device]) if device else _empty()
        node = device[-1] if device else root
        host_len = matched - len(slots)
        return MatchResult(slots, node, path[-1] if host_len else None, host_len)

    def insert(self, token_ids: Sequence[int] | np.ndarray, slots: np.ndarray, namespace: str = "") -> int:
        """Store ``slots`` as the KV of ``token_ids`` in ``namespace``; return how many leading tokens
        were already cached on the device.

        For that already-cached range the tree keeps its own slots: the caller frees its duplicates among
        ``slots[:returned]`` (those it did not get from ``match_prefix``). The rest of ``slots`` now
        belongs to the tree (nodes held only on the host tier take the caller's slots as their device copy).
        ``len(token_ids)`` must equal ``len(slots)`` and be a multiple of ``page_size`` (the caller truncates
        to whole pages). With ``disable=True`` nothing is stored and 0 is returned, so the caller frees
        everything.
        """
        tokens = _as_int64(token_ids)
        values = np.asarray(slots, dtype=np.int64)
        if values.shape != tokens.shape:
            raise ValueError(f"insert needs one slot per token: {tokens.shape} tokens, {values.shape} slots")
        if len(tokens) % self.page_size:
            raise ValueError(f"insert length {len(tokens)} is not a multiple of page_size {self.page_size}")
        if self.disable or len(tokens) == 0:
            return 0
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = self._new_root()
        tick = self._tick()
        path, matched = self._walk(root, tokens, tick)
        device = _device_part(path)
        on_device = pos = sum(len(n.key) for n in device)
        for node in path[len(device) :]:
            self._to_device(node, values[pos : pos + len(node.key)].copy())
            pos += len(node.key)
        node = path[-1] if path else root
        if matched < len(tokens):
            leaf = TreeNode(
                key=tokens[matched:].copy(),  # copies: the caller may reuse its buffers
                value=values[matched:].copy(),
                parent=node,
                last_access=tick,
                epoch=self._epoch,
            )
            # `node` stops being a leaf here, which makes its heap entry stale.
            node.children[self._child_key(leaf.key, 0)] = leaf
            self._num_nodes += 1
            self._version += 1
            self._evictable_size += len(leaf.key)
            self._push_if_evictable(leaf)
        return on_device

    def lock(self, node: TreeNode) -> None:
        """Add one reference to every node from ``node`` up to its root; locked nodes are never evicted."""
        if not self._is_live(node):
            return
        while node.parent is not None:  # roots hold no tokens and are never evicted
            if node.lock_ref == 0:
                self._evictable_size -= node.device_len
                self._protected_size += node.device_len
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: TreeNode) -> None:
        """Undo one :meth:`lock` of ``node``; a leaf whose count drops to 0 becomes evictable again."""
        if not self._is_live(node) or node.parent is None:
            return
        if node.lock_ref <= 0:  # ancestors' counts are >= node's, so checking node covers the path
            raise RuntimeError("unlock() of a node that is not locked")
        while node.parent is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable_size += node.device_len
                self._protected_size -= node.device_len
                self._push_if_evictable(node)
            node = node.parent

    def clear(self) -> np.ndarray:
        """Drop every node (``/flush_cache``, when nothing is locked); returns the device slots the tree held,
        for the caller's pool."""
        held = [n.value for n in self._nodes() if n.on_device]
        self.reset()
        return np.concatenate(held) if held else _empty()

    def evict(self, num_tokens: int) -> np.ndarray:
        """Evict least recently used unlocked device leaves until at least ``num_tokens`` device tokens are
        freed or nothing evictable is left. Returns the freed device slots (int64) for the caller's pool."""
        freed: list[np.ndarray] = []
        num_freed = 0
        while num_freed < num_tokens:
            node = self._heap.pop()
            if node is None:
                break
            freed.append(node.value)
            num_freed += len(node.value)
            self._evict_device_leaf(node)
        return np.concatenate(freed) if freed else _empty()

    # ------------------------------------------------------------------ internals

    def _nodes(self) -> list[TreeNode]:
        """Every non-root node, over all namespaces."""
        out: list[TreeNode] = []
        stack = list(self._roots.values())
        while stack:
            children = list(stack.pop().children.values())
            out += children
            stack += children
        return out

    def _evict_device_leaf(self, node: TreeNode) -> None:
        """Give up ``node``'s device slots (already handed to the caller); here the node goes."""
        self._remove_leaf(node)

    def _to_device(self, node: TreeNode, slots: np.ndarray) -> None:
        """``node``'s KV is now also in device ``slots`` (loaded, or recomputed by an inserting request)."""
        assert not node.on_device and len(slots) == len(node.key)
        node.value, node.on_device = slots, True
        if node.lock_ref:
            self._protected_size += len(slots)
        else:
            self._evictable_size += len(slots)
        self._version += 1
        self._push_if_evictable(node)

    def _walk(self, root: TreeNode, tokens: np.ndarray, tick: int) -> tuple[list[TreeNode], int]:
        """Follow ``tokens`` from ``root`` as far as the tree matches, splitting the last edge if the
        match ends inside it. Returns (the nodes along the path, matched length)."""
        node, pos = root, 0
        node.last_access = tick
        path: list[TreeNode] = []
        while pos < len(tokens):
            child = node.children.get(self._child_key(tokens, pos))
            if child is None:
                break
            n = self._common_len(child.key, tokens[pos:])
            if n < len(child.key):
                child = self._split(child, n)
            path.append(child)
            pos += n
            node = child
            self._touch(node, tick)
        return path, pos

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Split ``child``'s edge after ``n`` tokens; return the new upper node (ending at ``n``)."""
        parent = child.parent
        assert parent is not None and 0 < n < len(child.key) and n % self.page_size == 0
        host = child.host_value
        upper = TreeNode(
            key=child.key[:n],
            value=child.value[:n],
            parent=parent,
            lock_ref=child.lock_ref,  # every lock through `child` passes through `upper` too
            last_access=child.last_access,
            epoch=self._epoch,
            on_device=child.on_device,
            host_value=None if host is None else host[:n],
        )
        parent.children[self._child_key(child.key, 0)] = upper
        child.key, child.value = child.key[n:], child.value[n:]
        child.host_value = None if host is None else host[n:]
        child.parent = upper
        upper.children[self._child_key(child.key, 0)] = child
        self._num_nodes += 1
        self._push_if_evictable(upper)
        return upper

    def _remove_leaf(self, node: TreeNode) -> None:
        """Detach an unlocked childless node; its parent may become evictable in turn."""
        parent = node.parent
        assert parent is not None and not node.children and node.lock_ref == 0
        del parent.children[self._child_key(node.key, 0)]
        node.evicted, node.parent = True, None
        self._num_nodes -= 1
        self._version += 1
        self._evictable_size -= node.device_len
        if parent.parent is not None:
            self._push_if_evictable(parent)
        elif not parent.children:
            self._drop_root_if_empty(parent)

    def _drop_root_if_empty(self, root: TreeNode) -> None:
        # Why: keeps the namespace map bounded by the namespaces that still hold tokens.
        for ns, r in list(self._roots.items()):
            if r is root:
                del self._roots[ns]
                return

    def _touch(self, node: TreeNode, tick: int) -> None:
        node.last_access = tick
        self._push_if_evictable(node)  # re-key the node in the heaps with its new access time

    def _push_if_evictable(self, node: TreeNode) -> None:
        self._heap.push(node, self._num_nodes)

    @staticmethod
    def _is_device_leaf(node: TreeNode) -> bool:
        """Unlocked, on the device, and no child on the device: ``evict`` may take its slots."""
        return node.on_device and node.lock_ref == 0 and not any(c.on_device for c in node.children.values())

    def _is_live(self, node: TreeNode) -> bool:
        if node.epoch != self._epoch:  # from before reset(): its tree is gone, nothing to count
            return False
        if node.evicted:
            raise RuntimeError("lock/unlock of an evicted node (lock the match before evicting)")
        return True

    def _new_root(self) -> TreeNode:
        return TreeNode(epoch=self._epoch)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _child_key(self, tokens: np.ndarray, pos: int) -> ChildKey:
        if self.page_size == 1:
            return int(tokens[pos])
        return tuple(tokens[pos : pos + self.page_size].tolist())

    def _common_len(self, key: np.ndarray, tokens: np.ndarray) -> int:
        """Length of the common prefix of ``key`` and ``tokens``, rounded down to whole pages."""
        n = min(len(key), len(tokens))
        mismatch = np.flatnonzero(key[:n] != tokens[:n])
        common = int(mismatch[0]) if len(mismatch) else n
        return common - common % self.page_size


def _device_part(path: list[TreeNode]) -> list[TreeNode]:
    """The leading nodes of a path whose KV is on the device (the rest, if any, are host-only)."""
    return list(takewhile(lambda n: n.on_device, path))


def _as_int64(token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(token_ids, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"token ids must be a flat sequence, got shape {arr.shape}")
    return arr


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.int64)  # fresh each time: callers may keep or write into results
