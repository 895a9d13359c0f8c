"""The KV pool: K/V tensors for every layer, allocated once, and the single owner of page allocation."""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

import torch

from sprig.runtime.model import host_memory
from sprig.runtime.model.config import ModelConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSize:
    num_pages: int
    page_size: int

    @property
    def num_tokens(self) -> int:
        return self.num_pages * self.page_size


def bytes_per_token(cfg: ModelConfig, dtype: torch.dtype) -> int:
    return 2 * cfg.num_layers * cfg.kv_size * torch.empty(0, dtype=dtype).element_size()


def available_memory_bytes(device: str) -> int:
    """Free memory on the device the pool will live on (MemAvailable for the CPU)."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


def choose_pool_size(
    cfg: ModelConfig,
    dtype: torch.dtype,
    page_size: int,
    max_total_tokens: int | None,
    mem_fraction: float,
    device: str,
) -> PoolSize:
    """Size the pool from an explicit token count, else from a fraction of the device's free memory."""
    if max_total_tokens is not None:
        tokens = max_total_tokens
        how = "--max-total-tokens"
    else:
        budget = int(available_memory_bytes(device) * mem_fraction)
        tokens = budget // bytes_per_token(cfg, dtype)
        # A pool beyond what a full batch of max-context requests could use only wastes memory on the CPU.
        tokens = min(tokens, 64 * cfg.context_length)
        how = f"--mem-fraction {mem_fraction}"
    num_pages = max(1, tokens // page_size)
    size = PoolSize(num_pages, page_size)
    gib = size.num_tokens * bytes_per_token(cfg, dtype) / 2**30
    logger.info("KV pool: %d tokens (%d pages of %d), %.2f GiB, from %s", size.num_tokens, num_pages, page_size, gib, how)
    return size


class KVPool:
    """Per-layer K and V caches [num_pages * page_size, Hkv, D] and a free list of pages."""

    def __init__(self, cfg: ModelConfig, size: PoolSize, dtype: torch.dtype, device: str = "cpu") -> None:
        self.size = size
        self.page_size = size.page_size
        # One page beyond the usable ones: padding rows of static (CUDA-graph) batches write there.
        self.scratch_page = size.num_pages
        shape = (cfg.num_layers, 2, size.num_tokens + size.page_size, cfg.num_kv_heads, cfg.head_dim)
        self.buffer = host_memory.zeros(shape, dtype, device)
        self.k_caches = [self.buffer[i, 0] for i in range(cfg.num_layers)]
        self.v_caches = [self.buffer[i, 1] for i in range(cfg.num_layers)]
        # A min-heap: a request's pages come out in increasing, mostly adjacent order, so decode attention reads
        # its prompt's K/V as long runs instead of pages scattered over the whole pool.
        self._free: list[int] = list(range(size.num_pages))
        self._is_free = torch.ones(size.num_pages, dtype=torch.bool)

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_free_tokens(self) -> int:
        return len(self._free) * self.page_size

    def alloc(self, num_pages: int) -> list[int] | None:
        """Take `num_pages` pages, or None (and nothing taken) when too few are free."""
        if num_pages > len(self._free):
            return None
        pages = [heapq.heappop(self._free) for _ in range(num_pages)]
        self._is_free[pages] = False
        return pages

    def free(self, pages: list[int] | torch.Tensor) -> None:
        """Return pages; freeing a page twice is a bug and raises."""
        pages = [int(p) for p in pages]
        if not pages:
            return
        if bool(self._is_free[pages].any()) or len(set(pages)) != len(pages):
            raise RuntimeError("double free of KV pages")
        self._is_free[pages] = True
        for p in pages:
            heapq.heappush(self._free, p)

    def reset(self) -> None:
        self._free = list(range(self.size.num_pages))
        self._is_free.fill_(True)
