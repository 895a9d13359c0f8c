"""The KV pool: K/V tensors for every layer, allocated once, and the single owner of page allocation."""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

import numpy as np
import torch

from sprig.kernels.kv_quant import SCALE_DTYPE, KVCacheDtype
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


def page_slots(pages: list[int] | np.ndarray, page_size: int) -> np.ndarray:
    """The slots (int64) of whole pages, in page order."""
    return (np.asarray(pages, dtype=np.int64)[:, None] * page_size + np.arange(page_size)).reshape(-1)


def slot_pages(slots: np.ndarray, page_size: int) -> list[int]:
    """The pages of page-aligned slots (the inverse of `page_slots`)."""
    return (slots[::page_size] // page_size).tolist()


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def bytes_per_token(cfg: ModelConfig, dtype: torch.dtype, kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO) -> int:
    """Pool bytes one token takes over all layers: K and V elements, plus a scale per kv head when quantized."""
    per_head = cfg.head_dim * _element_size(kv_cache_dtype.storage_dtype(dtype))
    if kv_cache_dtype.quantized:
        per_head += _element_size(SCALE_DTYPE)
    return 2 * cfg.num_layers * cfg.num_kv_heads * per_head


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
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO,
) -> PoolSize:
    """Size the pool from an explicit token count, else from a fraction of the device's free memory."""
    if max_total_tokens is not None:
        tokens = max_total_tokens
        how = "--max-total-tokens"
    else:
        budget = int(available_memory_bytes(device) * mem_fraction)
        tokens = budget // bytes_per_token(cfg, dtype, kv_cache_dtype)
        # A pool beyond what a full batch of max-context requests could use only wastes memory on the CPU.
        tokens = min(tokens, 64 * cfg.context_length)
        how = f"--mem-fraction {mem_fraction}"
    num_pages = max(1, tokens // page_size)
    size = PoolSize(num_pages, page_size)
    gib = size.num_tokens * bytes_per_token(cfg, dtype, kv_cache_dtype) / 2**30
    logger.info("KV pool: %d tokens (%d pages of %d), %.2f GiB, %s, from %s", size.num_tokens, num_pages, page_size,
                gib, kv_cache_dtype.value, how)
    return size


class PageAllocator:
    """A free list of `num_pages` pages handed out lowest first, with a double-free check."""

    def __init__(self, num_pages: int, what: str = "KV pages") -> None:
        self._num_pages = num_pages
        self._what = what  # named in the double-free error
        # A min-heap: a request's pages come out in increasing, mostly adjacent order, so decode attention reads
        # its prompt's K/V as long runs instead of pages scattered over the whole pool.
        self._free: list[int] = list(range(num_pages))
        self._is_free = torch.ones(num_pages, dtype=torch.bool)

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

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
            raise RuntimeError(f"double free of {self._what}")
        self._is_free[pages] = True
        for p in pages:
            heapq.heappush(self._free, p)

    def reset(self) -> None:
        """Every page free again."""
        self._free = list(range(self._num_pages))
        self._is_free.fill_(True)


class KVPool(PageAllocator):
    """Per-layer K and V caches [num_pages * page_size, Hkv, D] and a free list of pages.

    With a quantized `kv_cache_dtype` the caches hold int8 / fp8 codes and `k_scales` / `v_scales` their bf16
    scales [num_pages * page_size, Hkv] (`kernels/kv_quant.py`); otherwise the scale lists are None.
    """

    def __init__(self, cfg: ModelConfig, size: PoolSize, dtype: torch.dtype, device: str = "cpu",
                 kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO) -> None:
        super().__init__(size.num_pages)
        self.size = size
        self.page_size = size.page_size
        self.kv_cache_dtype = kv_cache_dtype
        # One page beyond the usable ones: padding rows of static (CUDA-graph) batches write there.
        self.scratch_page = size.num_pages
        slots = size.num_tokens + size.page_size
        shape = (cfg.num_layers, 2, slots, cfg.num_kv_heads, cfg.head_dim)
        storage = kv_cache_dtype.storage_dtype(dtype)
        # fp8 tensors cannot be filled by torch on the CPU: zero the bytes, then view them as fp8
        raw = torch.uint8 if storage.itemsize == 1 else storage
        self.buffer = host_memory.zeros(shape, raw, device).view(storage)
        self.k_caches = [self.buffer[i, 0] for i in range(cfg.num_layers)]
        self.v_caches = [self.buffer[i, 1] for i in range(cfg.num_layers)]
        self.scales: torch.Tensor | None = None
        self.k_scales: list[torch.Tensor] | None = None
        self.v_scales: list[torch.Tensor] | None = None
        if kv_cache_dtype.quantized:
            self.scales = host_memory.zeros((cfg.num_layers, 2, slots, cfg.num_kv_heads), SCALE_DTYPE, device)
            self.k_scales = [self.scales[i, 0] for i in range(cfg.num_layers)]
            self.v_scales = [self.scales[i, 1] for i in range(cfg.num_layers)]

    @property
    def nbytes(self) -> int:
        """Bytes of the K/V tensors and their scales."""
        scales = 0 if self.scales is None else self.scales.numel() * self.scales.element_size()
        return self.buffer.numel() * self.buffer.element_size() + scales

    @property
    def num_free_tokens(self) -> int:
        return len(self._free) * self.page_size
