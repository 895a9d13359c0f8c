"""Which replica serves a request: cache-aware (where its prefix most likely sits in the KV cache), least loaded,
or round robin.

The router cannot see the replicas' caches, so it keeps its own approximate prefix tree per replica
(`sprig.radix.RadixCache` over the UTF-8 bytes of the prompt, or over token ids when the request carries ids):
every prompt routed to a replica is inserted into that replica's tree, least recently used prefixes are evicted
beyond a size bound. A request goes to the replica whose tree matches the longest part of its prompt, when that
part is large enough; otherwise to the replica with the smallest tree (the most room). When loads diverge (the
busiest replica has more than `balance_abs` requests in flight above the idlest and more than `balance_rel`
times as many) the least loaded replica wins regardless of cache, so a hot prefix cannot pile onto one replica.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from sprig.radix import RadixCache

MAX_KEY_BYTES = 16 << 10  # prefixes beyond this do not change where a request goes


class Policy(str, Enum):
    CACHE_AWARE = "cache_aware"
    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"


@dataclass(frozen=True)
class PolicyConfig:
    """Tuning of the cache-aware policy (defaults follow SGLang's router)."""

    policy: Policy = Policy.CACHE_AWARE
    cache_threshold: float = 0.5  # route by cache when this fraction of the prompt matches a replica's tree
    balance_abs: int = 32  # loads diverge when max - min in-flight exceeds this...
    balance_rel: float = 1.5  # ...and max exceeds this multiple of min
    max_tree_tokens: int = 1 << 22  # per replica; LRU prefixes beyond it are forgotten


@dataclass(frozen=True)
class RoutingKey:
    """What the router matches: a namespace (bytes of text, or token ids) and the sequence itself."""

    namespace: str
    tokens: np.ndarray  # int64

    @staticmethod
    def of_text(text: str) -> RoutingKey:
        data = text.encode("utf-8", "surrogatepass")[:MAX_KEY_BYTES]
        return RoutingKey("text", np.frombuffer(data, dtype=np.uint8).astype(np.int64))

    @staticmethod
    def of_ids(ids: Sequence[int]) -> RoutingKey:
        return RoutingKey("ids", np.asarray(ids[:MAX_KEY_BYTES], dtype=np.int64))

    @staticmethod
    def empty() -> RoutingKey:
        return RoutingKey("text", np.empty(0, dtype=np.int64))


def routing_key(path: str, body: Any) -> RoutingKey:
    """The prompt of a native or OpenAI request body (the first prompt of a batch); empty when there is none."""
    if not isinstance(body, dict):
        return RoutingKey.empty()
    if path.endswith("/chat/completions"):
        return RoutingKey.of_text(_chat_text(body.get("messages")))
    prompt = body.get("text") if path.endswith("/generate") else body.get("prompt")
    if path.endswith("/generate") and prompt is None:
        prompt = body.get("input_ids")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # why: a batch shares its replica; its first prompt stands for it
    if isinstance(prompt, str):
        return RoutingKey.of_text(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return RoutingKey.of_ids(prompt)
    return RoutingKey.empty()


def _chat_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"{m.get('role', '')}\n{content or ''}\n")
    return "".join(parts)


@dataclass(eq=False)
class PrefixIndex:
    """The router's guess of one replica's cache: prompts routed there, LRU-bounded."""

    max_tokens: int
    tree: RadixCache = field(default_factory=lambda: RadixCache(page_size=1))

    def match(self, key: RoutingKey) -> int:
        if len(key.tokens) == 0:
            return 0
        return len(self.tree.match_prefix(key.tokens, namespace=key.namespace).slots)

    def insert(self, key: RoutingKey) -> None:
        if len(key.tokens) == 0:
            return
        self.tree.insert(key.tokens, np.zeros(len(key.tokens), dtype=np.int64), namespace=key.namespace)
        excess = self.tree.total_size - self.max_tokens
        if excess > 0:
            self.tree.evict(excess)

    @property
    def size(self) -> int:
        return self.tree.total_size

    def clear(self) -> None:
        self.tree.reset()


@dataclass(frozen=True)
class Choice:
    """The chosen replica's index and why (for metrics)."""

    index: int
    reason: str  # "cache", "room", "balance", "round_robin", "least_loaded"
    matched: int  # prefix length the router believes is cached there


class Selector:
    """Picks a replica among the healthy ones; one instance per router, called on the event loop only."""

    def __init__(self, config: PolicyConfig, num_workers: int) -> None:
        self.config = config
        self.indexes = [PrefixIndex(config.max_tree_tokens) for _ in range(num_workers)]
        self._rr = itertools.count()

    def choose(self, key: RoutingKey, loads: Sequence[int], healthy: Sequence[int]) -> Choice:
        """The replica for `key`, given in-flight counts of every replica and the indices of the healthy ones."""
        if not healthy:
            raise LookupError("no healthy worker")
        policy = self.config.policy
        if policy is Policy.ROUND_ROBIN:
            return Choice(healthy[next(self._rr) % len(healthy)], "round_robin", 0)
        least = min(healthy, key=lambda i: (loads[i], i))
        if policy is Policy.LEAST_LOADED:
            return Choice(least, "least_loaded", 0)
        choice = self._cache_aware(key, loads, healthy, least)
        self.indexes[choice.index].insert(key)
        return choice

    def _cache_aware(self, key: RoutingKey, loads: Sequence[int], healthy: Sequence[int], least: int) -> Choice:
        if self._imbalanced([loads[i] for i in healthy]):
            return Choice(least, "balance", self.indexes[least].match(key))
        matches = {i: self.indexes[i].match(key) for i in healthy}
        best = max(healthy, key=lambda i: (matches[i], -loads[i], -i))
        if len(key.tokens) and matches[best] >= self.config.cache_threshold * len(key.tokens):
            return Choice(best, "cache", matches[best])
        roomiest = min(healthy, key=lambda i: (self.indexes[i].size, loads[i], i))
        return Choice(roomiest, "room", matches[roomiest])

    def _imbalanced(self, loads: list[int]) -> bool:
        hi, lo = max(loads), min(loads)
        return hi - lo > self.config.balance_abs and hi > self.config.balance_rel * lo

    def forget(self, index: int) -> None:
        """A replica died or restarted: its cache is gone."""
        self.indexes[index].clear()
