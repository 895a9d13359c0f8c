"""The host KV tier as the engine uses it: the tree's store for evicted KV, the loads back, and their figures.

`HostTier` implements the radix tree's `HostStore` over a `HostKVPool` (runtime/model/host_kv_pool.py), times
and counts every copy, and records each fallback to recompute with its reason: the tier is full of locked
nodes, a write failed, a load found no device room, or the tier could not be created at all (a full disk, an
unwritable cache file). A fallback never fails a request: the tokens are recomputed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np

from sprig.runtime.config import EngineConfig
from sprig.runtime.model.host_kv_pool import (
    HostBackend,
    HostKVPool,
    HostPoolSpec,
    HostTierUnavailable,
    host_pool_pages,
)
from sprig.runtime.model.kv_pool import KVPool, page_slots, slot_pages

logger = logging.getLogger(__name__)


class FallbackReason(str, Enum):
    """Why KV was recomputed instead of kept on or loaded from the host tier."""

    HOST_FULL = "host_full"  # no host room: every host copy is locked, or the node is larger than the tier
    WRITE_FAILED = "write_failed"  # the copy to the host raised
    DEVICE_FULL = "device_full"  # a host hit could not be loaded: no device room
    TIER_UNAVAILABLE = "tier_unavailable"  # the tier could not be created (full disk, unwritable cache file)


class PreemptMode(str, Enum):
    """What a preempted request's KV does until it resumes."""

    SWAP = "swap"  # moved to the host tier, loaded back on resume
    RECOMPUTE = "recompute"  # freed (or left to the device cache), recomputed on resume


@dataclass
class HiCacheCounters:
    """Figures of the host tier since start (zeros without one)."""

    device_hit_tokens: int = 0  # prompt tokens found on the device at admission
    host_hit_tokens: int = 0  # prompt tokens loaded from the host tier at admission
    offloaded_tokens: int = 0
    loaded_tokens: int = 0
    offload_bytes: int = 0
    load_bytes: int = 0
    offload_time_s: float = 0.0
    load_time_s: float = 0.0
    # Every key present from the start: /metrics iterates these from another thread while the engine counts.
    preemptions: Counter[PreemptMode] = field(default_factory=lambda: Counter(dict.fromkeys(PreemptMode, 0)))
    fallbacks: Counter[FallbackReason] = field(default_factory=lambda: Counter(dict.fromkeys(FallbackReason, 0)))

    def fallback(self, reason: FallbackReason, detail: str) -> None:
        """Count a fallback to recompute; the first of each reason is logged as a warning, later ones at debug."""
        self.fallbacks[reason] += 1
        log = logger.warning if self.fallbacks[reason] == 1 else logger.debug
        log("host KV tier: recomputing instead (%s): %s", reason.value, detail)


@dataclass(frozen=True)
class PrefixHit:
    """A request's cached prefix at admission, by tier."""

    device: int = 0
    host: int = 0

    @property
    def tokens(self) -> int:
        return self.device + self.host


class HostTier:
    """The radix tree's host store (slots in token units, as the tree keeps them) over a host page pool."""

    def __init__(self, pool: HostKVPool, counters: HiCacheCounters) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.counters = counters

    @property
    def num_free_tokens(self) -> int:
        return self.pool.num_free_pages * self.page_size

    @property
    def num_tokens(self) -> int:
        return self.pool.num_pages * self.page_size

    def write(self, device_slots: np.ndarray) -> np.ndarray | None:
        pages = self.pool.alloc(len(device_slots) // self.page_size)
        if pages is None:
            self.counters.fallback(FallbackReason.HOST_FULL, f"{len(device_slots)} tokens, "
                                   f"{self.num_free_tokens} of {self.num_tokens} host slots free")
            return None
        start = time.perf_counter()
        try:
            self.pool.save(self._pages(device_slots), pages)
        except (OSError, RuntimeError) as e:
            self.pool.free(pages)
            self.counters.fallback(FallbackReason.WRITE_FAILED, f"{type(e).__name__}: {e}")
            return None
        self._count(len(device_slots), start, offload=True)
        return page_slots(pages, self.page_size)

    def free(self, host_slots: np.ndarray) -> None:
        self.pool.free(self._pages(host_slots))

    def clear(self) -> None:
        self.pool.reset()

    def load(self, host_slots: np.ndarray, device_slots: np.ndarray) -> None:
        """Copy host slots back into device slots (both whole pages, in the same order)."""
        start = time.perf_counter()
        self.pool.load(self._pages(host_slots), self._pages(device_slots))
        self._count(len(host_slots), start, offload=False)

    def _count(self, num_tokens: int, start: float, offload: bool) -> None:
        c = self.counters
        elapsed = time.perf_counter() - start
        nbytes = num_tokens // self.page_size * self.pool.page_nbytes
        if offload:
            c.offloaded_tokens, c.offload_bytes, c.offload_time_s = (
                c.offloaded_tokens + num_tokens, c.offload_bytes + nbytes, c.offload_time_s + elapsed)
        else:
            c.loaded_tokens, c.load_bytes, c.load_time_s = (
                c.loaded_tokens + num_tokens, c.load_bytes + nbytes, c.load_time_s + elapsed)

    def _pages(self, slots: np.ndarray) -> list[int]:
        return slot_pages(slots, self.page_size)


def build_host_tier(config: EngineConfig, device: KVPool, counters: HiCacheCounters) -> HostTier | None:
    """The host tier `config` asks for, or None (with the reason counted and logged) when it cannot be made."""
    if not config.enable_hierarchical_cache:
        return None
    backend = HostBackend.FILE if config.hicache_storage_backend == "file" else HostBackend.MEMORY
    spec = HostPoolSpec(host_pool_pages(device, config.hicache_size, config.hicache_ratio), backend,
                        Path(config.hicache_storage_dir) if config.hicache_storage_dir else default_storage_dir())
    try:
        pool = HostKVPool(device, spec)
    except HostTierUnavailable as e:
        counters.fallback(FallbackReason.TIER_UNAVAILABLE, str(e))
        return None
    logger.info("host KV tier: %d tokens (%d pages), %.2f GiB, %s", spec.num_pages * device.page_size,
                spec.num_pages, pool.nbytes / 2**30, backend.value)
    return HostTier(pool, counters)


def default_storage_dir() -> Path:
    """The file backend's default folder: beside the built checkpoints (a disk, not a RAM-backed /tmp)."""
    from sprig.runtime.model.checkpoints import cache_dir

    return cache_dir() / "hicache"
